"""The verl stand-in's trainer loop: the only test double in this project, standing in for verl's GPU workload.

It runs under REAL Hydra (the entry modules use ``@hydra.main`` like verl's), so composition errors, ``--cfg job``
and the ``Error executing job with overrides`` wrapper are Hydra's own. Everything after composition imitates what
a verl driver prints (verl.md §7-§9): start-up lines, Ray prefixes, resume lines, ``step:N - k:v`` metrics, tqdm,
checkpoints with ``latest_checkpointed_iteration.txt``, ``Final validation metrics``. Failures are injected from
``standin_control.json`` (see standin_control). No torch, no ray: stdlib + omegaconf (+ swanlab when installed).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from omegaconf import DictConfig, OmegaConf
from verl_standin import standin_control, standin_failures, standin_yaml
from verl_standin.standin_control import Control, select, truthy
from verl_standin.standin_progress import NpFloat64, ProgressBar, RayOut
from verl_standin.standin_trackers import Tracking, backends

TREE_ROOT = Path(__file__).resolve().parents[1]
TRACKER = "latest_checkpointed_iteration.txt"


def verl_version(tree_root: Path = TREE_ROOT) -> tuple[int, ...]:
    try:
        text = (tree_root / "verl" / "version" / "version").read_text(encoding="utf-8").strip()
        return tuple(int(p) for p in text.split(".")[:3])
    except (OSError, ValueError):
        return (0, 0, 0)


def runner_name(workflow: str, tree_root: Path = TREE_ROOT) -> str:
    if workflow == "one_step_off":
        return "OneStepTaskRunner"
    return "DAPOTaskRunner" if verl_version(tree_root) >= (0, 7, 1) else "TaskRunner"


def on_import(workflow: str) -> None:
    """The recipe-vs-verl ImportError happens while importing the entry module, before Hydra runs. Otherwise this
    process's Hydra reads verl's YAML files on libyaml (standin_yaml: the same loader) and composes the config once,
    not twice (standin_yaml.compose_once_under_hydra_main): ~0.65 instead of ~0.81 s of CPU per process on the host."""
    if _load_control().fail == "import":
        raise standin_failures.import_error(str(TREE_ROOT))
    standin_yaml.use_libyaml_for_omegaconf()
    standin_yaml.compose_once_under_hydra_main()


def _load_control(tree_root: Path = TREE_ROOT) -> Control:
    try:
        return standin_control.load(tree_root)
    except (ValueError, TypeError) as exc:
        # A broken control file is a bug in the test, not a verl failure: exit 2 with a plain message.
        print(f"verl stand-in: bad control file: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc


class Process:
    """What the trainer does to its own process: sleep, hang until a signal, die of SIGKILL. The stand-in as a
    process (verl's entry modules) uses this; tests/harness/inprocess.py runs the same trainer in a thread of the
    test process, with sleeps a stop interrupts, and a kill that ends only the thread."""

    @property
    def pid(self) -> int:
        return os.getpid()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def hang(self) -> None:
        signal.signal(signal.SIGTERM, _sigterm_like_ray)
        while True:  # stop making progress, like a stuck collective; only a signal ends this
            time.sleep(3600)

    def kill(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class Trainer:
    def __init__(self, cfg: DictConfig, workflow: str, entry: str, *, tree_root: Path = TREE_ROOT,
                 cwd: str | None = None, process: Process | None = None, stream: TextIO | None = None) -> None:  # fmt: skip
        self.cfg = cfg
        self.workflow = workflow
        self.tree_root = tree_root
        self.cwd = cwd  # relative checkpoint dirs are under it (None: this process's working directory)
        self.proc = process or Process()
        self.ctl = _load_control(tree_root)
        pid = self.proc.pid
        runner = runner_name(workflow, tree_root)
        self.out = RayOut(runner, pid, pid + 1, stream)
        self.ray = standin_failures.RayContext(str(tree_root), runner, pid, pid + 1, entry)
        self.step_seconds = self.ctl.seconds_per_step
        if standin_control.holds(cfg, "offload"):
            self.step_seconds *= self.ctl.offload_slowdown
        self.resolved: Any = {}

    # -- helpers ---------------------------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        value = select(self.cfg, key)
        return default if value is None else value

    def fail_with(self, lines: list[str], error: BaseException) -> None:
        self.out.driver("\n".join(lines))
        raise error

    def check_runtime_failures(self, step: int) -> None:
        """Injected failures that fire at a step (0 = start-up, after the workers are "initialised")."""
        ctl, ray = self.ctl, self.ray
        if ctl.hang and step == ctl.fail_at_step:
            self.proc.hang()
        if step == ctl.fail_at_step:
            if ctl.fail == "sigkill":
                self.proc.kill()
            if ctl.fail == "worker_died":
                self.fail_with(*standin_failures.actor_died(ray))
            if ctl.fail == "nccl_timeout":
                timeout = int(self.get("actor_rollout_ref.nccl_timeout", 600))
                self.fail_with(*standin_failures.nccl_timeout(ray, timeout))
            if ctl.fail == "too_difficult":
                cap = int(self.get("algorithm.filter_groups.max_num_gen_batches", 0)) or 10  # 0 would mean endless
                lines, error = standin_failures.too_difficult(ray, cap)
                for line in lines:
                    self.out.runner(line)
                raise error
        if ctl.oom_fires(self.cfg, step):
            if ctl.oom_kind == "host":
                self.fail_with(*standin_failures.host_oom(ray))
            share = float(self.get("actor_rollout_ref.rollout.gpu_memory_utilization", 0.5))
            if ctl.oom_kind == "rollout_kv_cache":  # vLLM v1 kv_cache_utils._check_enough_kv_cache_memory
                raise standin_failures.vllm_engine_start_error(ray, (
                    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                    "initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                    "for more details."))  # fmt: skip
            if ctl.oom_kind == "rollout_free_memory":  # vLLM v1 worker/utils.request_memory, as on the H200
                total, free = 139.8, round(139.8 * (ctl.gpu_memory_utilization_max + 0.03), 2)
                raise standin_failures.vllm_engine_start_error(ray, (
                    f"Free memory on device cuda:0 ({free}/{total} GiB) on startup is less than desired GPU memory "
                    f"utilization ({share}, {round(total * share, 2)} GiB). Decrease GPU memory utilization or "
                    "reduce GPU memory used by other processes."))  # fmt: skip
            if ctl.oom_kind == "rollout":
                raise standin_failures.rollout_oom(
                    ray, str(self.get("actor_rollout_ref.rollout.mode", "sync")) == "async"
                )
            raise standin_failures.gpu_oom(ray, step)

    # -- start-up ----------------------------------------------------------------------------------------
    def start(self) -> int:
        """Prints the start-up phase; returns the total number of training steps.

        The markers are verl 0.9.1's, in the order the real H200 logs (tests/logs/real/) show them: ``ray init
        kwargs`` → Ray's ``Started a local Ray instance`` → config, datasets, ``Total training steps`` → the
        workers load the model → the rollout server actor starts vLLM (``vLLMHttpServer``, CUDA graphs).
        """
        pause = max(self.ctl.startup_seconds, 0.0) / 3
        self.out.driver("ray init kwargs: {'num_cpus': None, 'runtime_env': {'env_vars': {}}}", err=False)
        self.proc.sleep(pause)
        self.out.driver(
            f"{time.strftime('%Y-%m-%d %H:%M:%S')},123\tINFO worker.py:1879 -- Started a local Ray instance. "
            "View the dashboard at 127.0.0.1:8265 "
        )
        self.out.runner(f"{self.ray.runner} hostname: {socket.gethostname()}, PID: {self.ray.runner_pid}")
        for line in self.ctl.echo_lines:
            self.out.runner(line)
        self.resolved = OmegaConf.to_container(self.cfg, resolve=True)
        self.out.runner_pprint(self.resolved)
        self.check_startup_config()
        bsz = int(self.get("data.train_batch_size", 1024))
        train_batches = self.ctl.train_samples // max(bsz, 1)
        if train_batches < 1:
            raise self.ray.runner_error("AssertionError", "AssertionError: Train dataloader is empty!")
        total = train_batches * int(self.get("trainer.total_epochs", 1))
        if self.get("trainer.total_training_steps") is not None:
            total = int(self.get("trainer.total_training_steps"))
        self.out.runner(f"Size of train dataloader: {train_batches}, Size of val dataloader: 1")
        self.out.runner(f"Total training steps: {total}")
        warmup = max(int(self.get("actor_rollout_ref.actor.optim.lr_warmup_steps", -1)), 0)
        self.out.worker(f"Total steps: {total}, num_warmup_steps: {warmup}")
        self.out.worker(f"Actor use_remove_padding={self.get('actor_rollout_ref.model.use_remove_padding', False)}")
        self.out.worker("Loading weights: 100%|██████████| 26/26 [00:00<00:00, 4695.25it/s]")
        self.out.worker("Before FSDP, memory allocated (GB): 0.00, memory reserved (GB): 0.00, "
                        "device memory used/total (GB): 0.51/139.80")  # fmt: skip
        self.proc.sleep(pause)
        self.rollout_startup()
        self.proc.sleep(pause)
        self.check_runtime_failures(0)
        return total

    def rollout_startup(self) -> None:
        """verl 0.9's async rollout: a vLLMHttpServer actor runs `vllm serve` and captures CUDA graphs."""
        server = f"(vLLMHttpServer pid={self.ray.runner_pid + 7}) "
        util = self.get("actor_rollout_ref.rollout.gpu_memory_utilization", 0.5)
        for text in (
            "['serve',",
            f" '--gpu_memory_utilization', '{util}',",
            " '--tensor_parallel_size', '1']",
            "Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35 [00:00<00:00, 254.74it/s]",
        ):
            self.out._emit(server, text, self.out.stdout)  # fmt: skip

    def check_startup_config(self) -> None:
        ctl, ray = self.ctl, self.ray
        # one_step_off_policy/ray_trainer.py: `assert not self.hybrid_engine` (verl.md §4).
        if self.workflow == "one_step_off" and truthy(self.get("actor_rollout_ref.hybrid_engine", True)):
            where = f"{ray.root}/verl/experimental/one_step_off_policy/ray_trainer.py"
            body = standin_failures.frames((where, 120, "__init__", "assert not self.hybrid_engine"))
            raise ray.runner_error("AssertionError", body + "AssertionError")
        if ctl.fail == "config":
            n = int(self.get("actor_rollout_ref.rollout.n", 1))
            gpus = int(self.get("trainer.n_gpus_per_node", 8)) * int(self.get("trainer.nnodes", 1))
            raise standin_failures.config_error(ray, int(self.get("data.train_batch_size", 1024)) * n, gpus * 3)
        if ctl.fail == "missing_file":
            files = self.get("data.train_files", "~/data/rlhf/gsm8k/train.parquet")
            first = files[0] if isinstance(files, (list, tuple)) or OmegaConf.is_list(files) else files
            raise standin_failures.missing_file(ray, str(first))

    # -- checkpoints -------------------------------------------------------------------------------------
    def ckpt_root(self) -> Path:
        folder = str(self.get("trainer.default_local_dir", "checkpoints"))
        return Path(folder) if os.path.isabs(folder) else Path(self.cwd or os.getcwd(), folder)

    def load_checkpoint(self) -> int:
        """ray_trainer._load_checkpoint: returns the step to continue from (0 = from scratch)."""
        mode = str(self.get("trainer.resume_mode", "auto"))
        if mode == "disable":
            return 0
        root = self.ckpt_root()
        folder: str | None = None
        tracker = root / TRACKER
        if mode == "auto":
            if not tracker.is_file():
                self.out.runner(f"Checkpoint tracker file does not exist: {tracker}")
            else:
                candidate = root / f"global_step_{int(tracker.read_text(encoding='utf-8').strip())}"
                if candidate.is_dir():
                    folder = str(candidate)
                else:
                    self.out.runner(f"Checkpoint does not exist: {candidate}")
            if folder is None:
                self.out.runner("Training from scratch")
                return 0
        else:  # resume_path
            folder = str(self.get("trainer.resume_from_path"))
            assert "global_step_" in folder, "resume ckpt must specify the global_steps"
            if not os.path.isabs(folder):
                folder = os.path.join(self.cwd or os.getcwd(), folder)
        self.out.runner(f"Load from checkpoint folder: {folder}")
        step = int(folder.split("global_step_")[-1])
        self.out.runner(f"Setting global step to {step}")
        self.out.runner(f"Resuming from {folder}")
        self.out.worker(f"[rank-0]: Loading from {folder}/actor/model_world_size_1_rank_0.pt")
        return step

    def save_checkpoint(self, step: int) -> None:
        """ray_trainer._save_checkpoint: actor/ and data.pt first, the tracker last and atomically."""
        root = self.ckpt_root()
        folder = root / f"global_step_{step}"
        self.out.runner(f"local_global_step_folder: {folder}")
        actor = folder / "actor"
        actor.mkdir(parents=True, exist_ok=True)
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"verl stand-in weights\n")
        self.out.worker(f"[rank-0]: Saved model to {actor / 'model_world_size_1_rank_0.pt'}")
        (folder / "data.pt").write_bytes(b"verl stand-in dataloader state\n")
        if self.ctl.skip_tracker or truthy(self.get("actor_rollout_ref.actor.checkpoint.async_save", False)):
            self.out.runner("skip write latest_checkpointed_iteration.txt when async_save is True")  # verl #7952
            return
        tmp = root / f".{TRACKER}.{self.proc.pid}.tmp"
        tmp.write_text(str(step), encoding="utf-8")
        os.replace(tmp, root / TRACKER)

    # -- metrics -----------------------------------------------------------------------------------------
    def step_metrics(self, step: int, epoch: int, seconds: float) -> dict[str, Any]:
        offload = standin_control.holds(self.cfg, "offload")
        score = min(-0.6 + 0.05 * step, 0.9)
        length = 1200.0 + 37.0 * step
        tokens = int(length * int(self.get("data.train_batch_size", 512)))
        metrics: dict[str, Any] = {
            "actor/entropy": NpFloat64(round(0.52 - 0.003 * step, 6)),
            "actor/pg_loss": NpFloat64(round(-0.012 + 0.001 * (step % 5), 6)),
            "actor/pg_clipfrac": NpFloat64(0.0021),
            "actor/grad_norm": NpFloat64(round(0.31 + 0.01 * (step % 7), 6)),
            "actor/lr": float(self.get("actor_rollout_ref.actor.optim.lr", 1e-6)),
            "perf/max_memory_allocated_gb": 38.42 if offload else 61.87,
            "perf/max_memory_reserved_gb": 45.0 if offload else 70.12,
            "perf/cpu_memory_used_gb": 118.5 if offload else 52.3,
            "training/global_step": step,
            "training/epoch": epoch,
            "critic/score/mean": NpFloat64(round(score, 6)),
            "critic/score/max": NpFloat64(1.0),
            "critic/score/min": NpFloat64(-1.0),
            "critic/rewards/mean": NpFloat64(round(score, 6)),
            "response_length/mean": NpFloat64(length),
            "response_length/max": NpFloat64(float(self.get("data.max_response_length", 4096))),
            "response_length/clip_ratio": NpFloat64(0.0125),
            "prompt_length/mean": NpFloat64(212.5),
            "timing_s/gen": round(seconds * 0.55, 6),
            "timing_s/update_actor": round(seconds * 0.3, 6),
            "timing_s/step": round(seconds, 6),
            "perf/total_num_tokens": tokens,
            "perf/time_per_step": round(seconds, 6),
            "perf/throughput": round(tokens / max(seconds, 1e-6) / 8, 3),
        }
        if self.workflow == "dapo":
            metrics["train/num_gen_batches"] = 1
        return metrics

    def validate(self, step: int) -> dict[str, Any]:
        """ray_trainer._validate: its two console lines, then the val-* metrics."""
        self.out.runner(
            "test_gen_batch meta info: {'eos_token_id': 2, 'pad_token_id': 0, 'recompute_log_prob': False, "
            f"'do_sample': True, 'validate': True, 'global_steps': {step}}}"
        )
        self.out.runner("validation generation end")
        acc = min(0.1 + 0.02 * step, 0.8)
        return {
            "val-core/math_dapo/acc/mean@1": NpFloat64(round(acc, 6)),
            "val-aux/math_dapo/reward/mean@1": NpFloat64(round(2 * acc - 1, 6)),
        }

    # -- the loop ----------------------------------------------------------------------------------------
    def fit(self) -> None:
        total = self.start()
        names = backends(self.get("trainer.logger", ["console"]))
        tracking = Tracking(
            self.out, names, str(self.get("trainer.project_name", "verl_examples")),
            str(self.get("trainer.experiment_name", "gsm8k")), self.resolved,
        )  # fmt: skip
        step = self.load_checkpoint()
        if truthy(self.get("trainer.val_before_train", True)):
            val = self.validate(step)
            self.out.runner_pprint(f"Initial validation metrics: {val}")
            tracking.log(val, step)
            if truthy(self.get("trainer.val_only", False)):
                tracking.finish()
                return
        bar = ProgressBar(self.out, total, initial=step, glue_from=self.ctl.glue_tqdm_from_step)
        save_freq = int(self.get("trainer.save_freq", -1))
        test_freq = int(self.get("trainer.test_freq", -1))
        per_epoch = max(total // max(int(self.get("trainer.total_epochs", 1)), 1), 1)
        last_val: dict[str, Any] | None = None
        step += 1
        while step <= total:
            started = time.monotonic()
            self.proc.sleep(self.step_seconds)
            self.check_runtime_failures(step)
            is_last = step >= total
            metrics = self.step_metrics(step, (step - 1) // per_epoch, time.monotonic() - started)
            # verl 0.9.1 saves, then validates, then prints the step's metrics line (tests/logs/real/).
            if save_freq > 0 and (is_last or step % save_freq == 0):
                began = time.monotonic()
                self.save_checkpoint(step)
                metrics["timing_s/save_checkpoint"] = round(time.monotonic() - began, 6)  # as verl times it
            if test_freq > 0 and (is_last or step % test_freq == 0):
                val = self.validate(step)
                metrics.update(val)
                if is_last:
                    last_val = val
            tracking.log(metrics, step)
            bar.update(1)
            if is_last:
                break
            step += 1
        self.out.runner_pprint(f"Final validation metrics: {last_val}")
        bar.close()
        tracking.finish()


def run(cfg: DictConfig, workflow: str, entry: str) -> None:
    """Entry point called from the stand-in's @hydra.main task function."""
    Trainer(cfg, workflow, entry).fit()


def sigterm_lines(pid: int) -> str:
    """What Ray's driver prints when SIGTERM ends a hung run (glog's failure handler).

    verl 0.9.1 / Ray 2.60 on the H200, the driver blocked in ray.get (bench/gpu/results/hang/attempt1.log):
    ``[2026-12-01 14:46:53,387 E 849 849] logging.cc:474: *** SIGTERM received at time=1796136413 on cpu 10 ***``
    """
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now * 1000) % 1000:03d}"
    head = f"[{stamp} E {pid} {pid}] logging.cc:474:"
    return (f"{head} *** SIGTERM received at time={int(now)} on cpu 0 ***\n"
            f"{head} PC: @     0x7f8affc98e51  (unknown)  (unknown)\n"
            f"{head}     @     0x7f8afd280b3f       1184  ray::core::GetRequest::Wait()\n")  # fmt: skip


def _sigterm_like_ray(signum: int, frame: object) -> None:
    """Ray's lines for the SIGTERM (``sigterm_lines``), then death by the signal."""
    pid = os.getpid()
    sys.stdout.write(sigterm_lines(pid))
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(pid, signal.SIGTERM)
