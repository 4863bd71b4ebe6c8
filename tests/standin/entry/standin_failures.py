"""The real error texts a failing verl run prints, rebuilt without torch or ray (peers.md §2.2).

Each builder returns an exception whose *type name* prints like the real one (``ray.exceptions.RayTaskError(
OutOfMemoryError)``, ``torch.OutOfMemoryError`` nested inside it, ...), so Hydra's own ``Error executing job with
overrides: [...]`` wrapper and traceback printing produce the final text, exactly as around the real ``ray.get``.
Some failures also emit the lines Ray forwards before the driver raises (``(raylet) ...``, ``(WorkerDict pid=N)``).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

RAY_PKG = "/usr/local/lib/python3.10/dist-packages"
IP = "127.0.0.1"

TORCH_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.23 GiB is "
    "free. Process {pid} has 77.91 GiB memory in use. Of the allocated memory 74.62 GiB is allocated by PyTorch, and "
    "2.51 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
VLLM_WAKE_OOM = "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"
ROOT_CAUSES = (
    "There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory "
    "usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected "
    "errors."
)
EXIT_DETAIL = "Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file."


def exc_type(module: str, name: str) -> type[Exception]:
    """An exception class that traceback prints as ``module.name`` (Ray builds RayTaskError(X) the same way)."""
    return type(name, (Exception,), {"__module__": module, "__qualname__": name})


def ray_task_error(inner: str) -> type[Exception]:
    return exc_type("ray.exceptions", f"RayTaskError({inner})")


def fake_id(seed: str, length: int) -> str:
    """Stable hex ids shaped like Ray's actor (32) / node and worker (56) ids."""
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def frames(*entries: tuple[str, int, str, str]) -> str:
    return "".join(f'  File "{path}", line {line}, in {func}\n    {code}\n' for path, line, func, code in entries)


@dataclass(frozen=True)
class RayContext:
    """Who is "running" in the imitated Ray cluster; used to word headers the way Ray does."""

    root: str  # the verl tree (paths in fake frames)
    runner: str  # TaskRunner / DAPOTaskRunner / OneStepTaskRunner
    runner_pid: int
    worker_pid: int
    entry: str  # module the runner class lives in, for its repr

    def runner_header(self) -> str:
        actor = fake_id(f"runner{self.runner_pid}", 32)
        return (
            f"ray::{self.runner}.run() (pid={self.runner_pid}, ip={IP}, actor_id={actor}, "
            f"repr=<{self.entry}.{self.runner} object at 0x7f3a1c2b5e50>)"
        )

    def worker_header(self, method: str, cls: str = "WorkerDict") -> str:
        actor = fake_id(f"worker{self.worker_pid}", 32)
        where = "verl.single_controller.ray.base.WorkerDict" if cls == "WorkerDict" else f"{cls}"
        return (
            f"ray::{cls}.{method}() (pid={self.worker_pid}, ip={IP}, actor_id={actor}, "
            f"repr=<{where} object at 0x7f2e5c1d4a90>)"
        )

    def runner_frames(self, call: str) -> str:
        return frames(
            (f"{self.root}/verl/trainer/main_ppo.py", 317, "run", "trainer.fit()"),
            (f"{self.root}/verl/trainer/ppo/ray_trainer.py", 1213, "fit", call),
            (f"{self.root}/verl/single_controller/ray/base.py", 51, "__call__", "output = ray.get(output)"),
        )

    def worker_frames(self) -> str:
        return frames(
            (f"{RAY_PKG}/ray/_private/function_manager.py", 689, "actor_method_executor",
             "return method(__ray_actor, *args, **kwargs)"),
            (f"{self.root}/verl/single_controller/ray/base.py", 705, "func",
             "return getattr(self.worker_dict[key], name)(*args, **kwargs)"),
            (f"{self.root}/verl/single_controller/base/decorator.py", 514, "inner", "return func(*args, **kwargs)"),
        )  # fmt: skip

    def wrapped(self, inner_type: str, inner_header: str, inner_body: str, call: str) -> Exception:
        """RayTaskError(X) from TaskRunner.run() whose text nests the worker's RayTaskError(X) and the root error."""
        text = (
            f"{self.runner_header()}\n{self.runner_frames(call)}"
            f"ray.exceptions.RayTaskError({inner_type}): {inner_header}\n{inner_body}"
        )
        return ray_task_error(inner_type)(text)

    def runner_error(self, inner_type: str, body: str) -> Exception:
        """RayTaskError(X) raised inside TaskRunner.run() itself (start-up checks, data loading)."""
        return ray_task_error(inner_type)(f"{self.runner_header()}\n{body}")


def gpu_oom(ctx: RayContext, step: int) -> Exception:
    method = "actor_rollout_ref_update_actor" if step > 0 else "actor_rollout_ref_init_model"
    body = ctx.worker_frames() + frames(
        (f"{ctx.root}/verl/workers/fsdp_workers.py", 824, "update_actor", "metrics = self.actor.update_policy(data=data)"),
        (f"{ctx.root}/verl/workers/actor/dp_actor.py", 460, "update_policy",
         "entropy, log_prob = self._forward_micro_batch("),
        (f"{RAY_PKG}/torch/nn/modules/module.py", 1751, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
    ) + "torch.OutOfMemoryError: " + TORCH_OOM.format(pid=ctx.worker_pid)  # fmt: skip
    return ctx.wrapped(
        "OutOfMemoryError", ctx.worker_header(method), body, "actor_output = self.actor_rollout_wg.update_actor(batch)"
    )


def rollout_oom(ctx: RayContext, async_mode: bool) -> Exception:
    body = frames(
        (f"{RAY_PKG}/vllm/device_allocator/cumem.py", 211, "wake_up", "create_and_map(handle)"),
        (f"{RAY_PKG}/vllm/device_allocator/cumem.py", 76, "create_and_map", "python_create_and_map(*allocation_handle)"),
    ) + f"RuntimeError: {VLLM_WAKE_OOM}"  # fmt: skip
    if async_mode:
        header = ctx.worker_header("wake_up", cls="vLLMHttpServer")
        call = "gen_batch_output = self.async_rollout_manager.generate_sequences(gen_batch_output)"
    else:
        header = ctx.worker_header("actor_rollout_ref_generate_sequences")
        call = "gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch_output)"
    return ctx.wrapped("RuntimeError", header, body, call)


def vllm_engine_start_error(ctx: RayContext, message: str) -> Exception:
    """vLLM 0.24 refusing to start inside verl's vLLMHttpServer actor (tests/logs/real/…-startup-memory-attempt1.log):
    the worker's ValueError, then the engine's "WorkerProc initialization failed"."""
    body = frames(
        (f"{RAY_PKG}/vllm/v1/executor/multiproc_executor.py", 626, "__init__", "self.worker.init_device()"),
        (f"{RAY_PKG}/vllm/v1/worker/gpu_worker.py", 342, "init_device",
         "self.requested_memory = request_memory(init_snapshot, self.cache_config)"),
    ) + f"ValueError: {message}\nException: WorkerProc initialization failed due to an exception in a background " \
        "process. See stack trace for root cause."  # fmt: skip
    header = ctx.worker_header("launch_server", cls="vLLMHttpServer")
    return ctx.wrapped("Exception", header, body, "self.async_rollout_manager = AgentLoopManager(")


def host_oom(ctx: RayContext) -> tuple[list[str], Exception]:
    node = fake_id("node", 56)
    worker = fake_id(f"w{ctx.runner_pid}", 56)
    raylet = (
        f"(raylet) [{_stamp()} E {ctx.runner_pid - 40} {ctx.runner_pid - 40}] (raylet) node_manager.cc:3193: 1 Workers "
        f"(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node "
        f"(ID: {node}, IP: {IP}) over the last time period. To see more information about the Workers killed on this "
        f"node, use `ray logs raylet.out -ip {IP}`"
    )
    text = (
        "Task was killed due to the node running low on memory.\n"
        f"Memory on the node (IP: {IP}, ID: {node}) where the task (actor ID: {fake_id('runner', 32)}, "
        f"name={ctx.runner}.__init__, pid={ctx.runner_pid}, memory used=20.12GB) was running was 23.10GB / 24.00GB "
        f"(0.9625), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: {worker}) because it "
        "was the most recently scheduled task; to see more information about memory usage on this node, use "
        f"`ray logs raylet.out -ip {IP}`. To see the logs of the worker, use `ray logs worker-{worker}*out -ip {IP}. "
        f"Top 10 memory users:\nPID\tMEM(GB)\tCOMMAND\n{ctx.runner_pid}\t20.12\tray::{ctx.runner}.run\n"
        f"{ctx.worker_pid}\t1.85\tray::WorkerDict\n"
        "Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory "
        "on this node or reducing task parallelism by requesting more CPUs per task. Set max_restarts and "
        "max_task_retries to enable retry when the task crashes due to OOM. To adjust the kill threshold, set the "
        "environment variable `RAY_memory_usage_threshold` when starting Ray. To disable worker killing, set the "
        "environment variable `RAY_memory_monitor_refresh_ms` to zero."
    )
    return [raylet], exc_type("ray.exceptions", "OutOfMemoryError")(text)


def config_error(ctx: RayContext, real_bsz: int, minimal_bsz: int) -> Exception:
    body = frames(
        (f"{ctx.root}/verl/trainer/main_ppo.py", 271, "run", "validate_config("),
        (f"{ctx.root}/verl/utils/config.py", 150, "validate_config", "assert real_train_batch_size % minimal_bsz == 0, ("),
    ) + (
        f"AssertionError: real_train_batch_size ({real_bsz}) must be divisible by minimal possible batch size "
        f"({minimal_bsz})"
    )  # fmt: skip
    return ctx.runner_error("AssertionError", body)


def missing_file(ctx: RayContext, path: str) -> Exception:
    body = frames(
        (f"{ctx.root}/verl/utils/dataset/rl_dataset.py", 151, "_read_files_and_tokenize",
         'dataframe = datasets.load_dataset("parquet", data_files=parquet_file)["train"]'),
        (f"{RAY_PKG}/datasets/data_files.py", 400, "resolve_pattern", "raise FileNotFoundError(error_msg)"),
    ) + f"FileNotFoundError: Unable to find '{path}'"  # fmt: skip
    return ctx.runner_error("FileNotFoundError", body)


def too_difficult(ctx: RayContext, max_batches: int) -> tuple[list[str], Exception]:
    n = max_batches + 1
    lines = ["num_prompt_in_batch=3 < prompt_bsz=512", f"num_gen_batches={n}. Keep generating..."]
    body = frames(
        (f"{ctx.root}/recipe/dapo/dapo_ray_trainer.py", 288, "fit", "raise ValueError("),
    ) + (
        f"ValueError: num_gen_batches={n} >= max_num_gen_batches={max_batches}. Generated too many. Please check if "
        "your data are too difficult. You could also try set max_num_gen_batches=0 to enable endless trials."
    )  # fmt: skip
    return lines, ctx.runner_error("ValueError", body)


def actor_died(ctx: RayContext) -> tuple[list[str], Exception]:
    worker = fake_id(f"w{ctx.worker_pid}", 56)
    raylet = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot "
        f"the problem, check the logs for the dead worker. RayTask ID: {fake_id('task', 48)} Worker ID: {worker} "
        f"Node ID: {fake_id('node', 56)} Worker IP address: {IP} Worker port: 10123 Worker PID: {ctx.worker_pid} "
        f"{EXIT_DETAIL} {ROOT_CAUSES}"
    )
    inner = (
        "The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict\n"
        f"\tactor_id: {fake_id(f'worker{ctx.worker_pid}', 32)}\n\tpid: {ctx.worker_pid}\n"
        f"\tnamespace: {fake_id('ns', 8)}-{fake_id('ns2', 4)}\n\tip: {IP}\n"
        f"The actor is dead because its worker process has died. {EXIT_DETAIL} {ROOT_CAUSES}"
    )
    body = ctx.runner_frames("actor_output = self.actor_rollout_wg.update_actor(batch)")
    error = ray_task_error("ActorDiedError")(f"{ctx.runner_header()}\n{body}ray.exceptions.ActorDiedError: {inner}")
    return [raylet], error


def nccl_timeout(ctx: RayContext, timeout_s: int) -> tuple[list[str], Exception]:
    ms = timeout_s * 1000
    work = (
        f"WorkNCCL(SeqNum=4127, OpType=_ALLGATHER_BASE, NumelIn=1048576, NumelOut=8388608, Timeout(ms)={ms}) "
        f"ran for {ms + 43} milliseconds before timing out."
    )
    stamp = time.strftime("E%m%d %H:%M:%S.123456789")
    prefix = f"(WorkerDict pid={ctx.worker_pid}) "
    lines = [
        f"{prefix}[rank0]:[{stamp} ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: {work}",
        f"{prefix}[rank0]:[{stamp} ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 0] failure detected "
        "by watchdog at work sequence id: 4127 PG status: last enqueued work: 4127, last completed work: 4126",
        f"{prefix}terminate called after throwing an instance of 'c10::DistBackendError'",
        f"{prefix}  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with "
        f"exception: [Rank 0] Watchdog caught collective operation timeout: {work}",
        f"{prefix}*** SIGABRT received at time={int(time.time())} on cpu 3 ***",
    ]
    died_lines, error = actor_died(ctx)
    return lines + died_lines, error


def import_error(root: str) -> ImportError:
    """What the pinned recipe's main_dapo raises on verl >= 0.9.0 (verl.md §1)."""
    return ImportError(
        f"cannot import name 'TaskRunner' from 'verl.trainer.main_ppo' ({root}/verl/trainer/main_ppo.py)"
    )


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S,123")
