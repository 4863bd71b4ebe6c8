"""A fast generator of verl-format training logs, run INSIDE the container (``python3 -c GENERATOR PATH BYTES``).

Each step is one realistic block, as a verl DAPO driver prints it through Ray: ``(DAPOTaskRunner pid=N)`` and
``(WorkerDict pid=N)`` prefixed lines, vLLM / FSDP INFO chatter, the ``step:N - k:np.float64(v) - …`` metrics line,
and tqdm's ``\\rTraining Progress: …`` redraw. One ``%`` format per block keeps it at hundreds of MB/s; the file is
opened for appending, so a live run writing the same log keeps its own lines whole (each ``write`` of an O_APPEND
file lands at the end at once).
"""

from __future__ import annotations

GENERATOR = r"""
import os, sys
path, target = sys.argv[1], int(sys.argv[2])
first_step = int(sys.argv[3]) if len(sys.argv) > 3 else 1
total = 1000000  # the filler's own bar; the live run's lines at the end carry the real one
R, W = "(DAPOTaskRunner pid=4127) ", "(WorkerDict pid=4311) "
metric_keys = ["actor/entropy", "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm",
    "critic/score/mean", "critic/score/max", "critic/score/min", "critic/rewards/mean", "critic/advantages/mean",
    "critic/advantages/max", "critic/advantages/min", "response_length/mean", "response_length/max",
    "response_length/min", "response_length/clip_ratio", "prompt_length/mean", "prompt_length/max",
    "timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/adv", "timing_s/update_actor",
    "timing_s/step", "perf/total_num_tokens", "perf/time_per_step", "perf/throughput",
    "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb"]
metrics = " - ".join(k + ":np.float64(0.%d%%(v)s)" % (i + 11) for i, k in enumerate(metric_keys))
block = (
    R + "num_prompt_in_batch=512 >= prompt_bsz=512\n"
    + W + "INFO 11-29 16:%(mm)s:01 [block_pool.py:321] Successfully reset prefix cache\n"
    + W + "INFO 11-29 16:%(mm)s:02 [gpu_model_runner.py:2007] Model loading took 15.2683 GiB and 4.9 seconds\n"
    + W + "INFO 11-29 16:%(mm)s:03 [executor_base.py:212] It took 0.412 seconds to wake up tags [weights, kv_cache]\n"
    + W + "[rank0]: update_policy: micro batches 16, dynamic bsz, max_token_len 24576, loss_agg_mode token-mean\n"
    + R + "Processed prompts: 100%%|##########| 4096/4096 [01:12<00:00, 56.43it/s, est. speed input: 11984.1 toks/s]\n"
    + W + "INFO 11-29 16:%(mm)s:41 [executor_base.py:205] It took 0.398 seconds to fall asleep.\n"
    + R + "step:%(step)d - " + metrics + " - training/global_step:%(step)d - training/epoch:0\n"
    + R + "\rTraining Progress:  %(pct)d%%|          | %(step)d/%(total)d [1:23:45<99:59:59, 50.00s/it]\n"
)
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
size = os.fstat(fd).st_size
step = first_step
buf = []
pending = 0
while size + pending < target:
    text = block % {"step": step, "v": step % 997, "mm": "%02d" % (step % 60), "pct": step * 100 // total,
                    "total": total}
    buf.append(text)
    pending += len(text)
    step += 1
    if pending >= (1 << 20):
        data = "".join(buf).encode()
        os.write(fd, data)
        size += len(data)
        buf, pending = [], 0
if buf:
    os.write(fd, "".join(buf).encode())
os.close(fd)
print(step)
"""
