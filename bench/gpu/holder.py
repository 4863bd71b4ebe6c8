"""Another process holding GPU memory, the way a second job on a shared GPU does (plain cudaMalloc via torch).

  python3 holder.py static GIB SECONDS
      hold GIB GiB for SECONDS (the rollout start-up memory scenario).
  python3 holder.py after-ckpt CKPT_ROOT STEP MARGIN_GIB FREE_FOR_NEXT_GIB LOG
      the actor-OOM scenario: once verl has written STEP into a latest_checkpointed_iteration.txt under CKPT_ROOT
      (a real, complete checkpoint), wait for the next rollout (vLLM wakes: free memory drops) to end (vLLM sleeps:
      free memory rises), then take all free memory but MARGIN_GIB, so that the actor's next allocations (its
      log-prob forward and update: gradients of every parameter) raise torch's real OutOfMemoryError inside verl.
      When the trainer has died (free memory rises again), shrink so that FREE_FOR_NEXT_GIB stay free for the
      relaunch: enough for vLLM's share plus an offloaded actor, not for an actor that keeps its fp32 parameters
      and Adam states on the GPU.
  python3 holder.py selftest
      the phase logic against a recorded-like free-memory trace (CPU only).
Every phase change is logged with a timestamp and the free memory seen, so the harness can show what happened.
"""

from __future__ import annotations

import glob
import os
import sys
import time

GIB = 1 << 30
DROP_GIB = 15.0  # vLLM's weights + KV cache here are ~30 GiB; the actor's transients are far smaller
RISE_GIB = 15.0
DEATH_RISE_GIB = 8.0  # the dead trainer frees its fp32 params + Adam states (~12 GiB for the wide model)
NO_OOM_SECONDS = 600.0
RECENT_SECONDS = 10.0
SETTLE_SECONDS = 0.2


class Phases:
    """wait_ckpt -> wait_wake -> wait_sleep -> (grab) -> wait_death -> (shrink) -> done. Pure: fed free-memory samples."""

    def __init__(self) -> None:
        self.phase = "wait_ckpt"
        self.ref = 0.0  # free memory before the wake-up / minimum during rollout / after the grab
        self.recent: list[tuple[float, float]] = []
        self.settle_since = 0.0  # (t, free) of the last RECENT_SECONDS while waiting

    def feed(self, free_gib: float, ckpt_done: bool, now: float | None = None) -> str | None:
        """Returns the action to take now: 'grab', 'shrink' or None."""
        t = time.time() if now is None else now
        if self.phase == "wait_ckpt":
            # The wake-up follows the checkpoint at once and the file is polled: compare with the free memory of
            # the last seconds (vLLM asleep while the checkpoint was written), not with a reading taken after it.
            self.recent = [(ts, f) for ts, f in self.recent if t - ts < RECENT_SECONDS] + [(t, free_gib)]
            if ckpt_done:
                self.phase, self.ref = "wait_wake", max(f for _, f in self.recent)
        elif self.phase == "wait_wake":
            if free_gib < self.ref - DROP_GIB:
                self.phase, self.ref = "wait_sleep", free_gib
        elif self.phase == "wait_sleep":
            self.ref = min(self.ref, free_gib)
            if free_gib > self.ref + RISE_GIB:
                self.phase, self.ref, self.settle_since = "settling", free_gib, t
        elif self.phase == "settling":
            # vLLM unmaps its memory block by block and then checks that free memory grew ("Memory usage increased
            # after sleeping" otherwise): grab only once free memory has stopped rising.
            if free_gib > self.ref + 0.25:
                self.ref, self.settle_since = free_gib, t
            elif t - self.settle_since >= SETTLE_SECONDS:
                self.phase = "grabbed"
                return "grab"
        elif self.phase == "grabbed":
            self.phase, self.ref = "wait_death", free_gib
        elif self.phase == "wait_death":
            self.ref = min(self.ref, free_gib)
            if free_gib > self.ref + DEATH_RISE_GIB:
                self.phase = "done"
                return "shrink"
        return None


def _log(fh, msg: str) -> None:
    fh.write(f"{time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d} {msg}\n")
    fh.flush()


def _ckpt_done(root: str, step: int, since: float) -> bool:
    for path in glob.glob(os.path.join(root, "**", "latest_checkpointed_iteration.txt"), recursive=True):
        try:
            with open(path) as fh:
                text = fh.read().strip()
            if os.path.getmtime(path) >= since and text == str(step):
                return True
        except OSError:
            pass
    return False


def after_ckpt(root: str, step: int, margin_gib: float, free_next_gib: float, log_path: str) -> None:
    import torch

    fh = open(log_path, "a")  # noqa: SIM115 (open for the holder's whole life; it ends by being killed)
    free = lambda: torch.cuda.mem_get_info()[0] / GIB  # noqa: E731
    total = torch.cuda.mem_get_info()[1] / GIB
    start = time.time()
    phases = Phases()
    chunks: list[torch.Tensor] = []
    keep: torch.Tensor | None = None
    _log(fh, f"holder up: total {total:.1f} GiB, free {free():.1f} GiB; waiting for checkpoint {step} under {root}")
    last_ckpt_check = grabbed_at = 0.0
    ckpt = False
    while phases.phase != "done":
        now = time.time()
        if not ckpt and now - last_ckpt_check > 0.5:
            ckpt, last_ckpt_check = _ckpt_done(root, step, start), now
        f = free()
        before = phases.phase
        action = phases.feed(f, ckpt)
        if phases.phase != before:
            _log(fh, f"{before} -> {phases.phase} (free {f:.1f} GiB)")
        if action == "grab":
            # The part kept for the relaunch in one block, the rest in chunks that can be given back.
            keep_gib = max(0.0, min(total - free_next_gib - 1.0, f - margin_gib - 1.0))
            try:
                keep = torch.empty(int(keep_gib * GIB), dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError:
                keep = None
            for size in (GIB, GIB // 4, GIB // 16):
                while free() > margin_gib + size / GIB:
                    try:
                        chunks.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
                    except torch.OutOfMemoryError:
                        break
            held = (keep.numel() if keep is not None else 0) / GIB + sum(c.numel() for c in chunks) / GIB
            _log(fh, f"GRAB: holding {held:.1f} GiB, free now {free():.2f} GiB (margin {margin_gib} GiB)")
            grabbed_at = time.time()
        if phases.phase == "wait_death" and time.time() - grabbed_at > NO_OOM_SECONDS:
            _log(fh, "no trainer death within the limit: giving everything back")
            break
        if action == "shrink":
            time.sleep(3.0)  # let the rest of the dead trainer's processes go
            while chunks and free() < free_next_gib:
                chunks.pop()
                torch.cuda.empty_cache()
            held = (keep.numel() if keep is not None else 0) / GIB + sum(c.numel() for c in chunks) / GIB
            _log(
                fh, f"SHRINK: trainer gone; holding {held:.1f} GiB, free now {free():.1f} GiB (target {free_next_gib})"
            )
        time.sleep(0.005)
    if phases.phase != "done":
        chunks.clear()
        keep = None
        torch.cuda.empty_cache()
    _log(fh, f"holding until killed; free {free():.1f} GiB")
    while True:
        time.sleep(5)
        _log(fh, f"free {free():.1f} GiB")


def static(gib: float, seconds: float) -> None:
    import torch

    x = torch.empty(int(gib * GIB), dtype=torch.uint8, device="cuda")
    print(f"holding {x.numel() / GIB:.1f} GiB; free {torch.cuda.mem_get_info()[0] / GIB:.1f} GiB", flush=True)
    time.sleep(seconds)


def selftest() -> None:
    p = Phases()
    trace = [
        (120, False),
        (120, True),
        (118, True),
        (85, True),
        (84, True),
        (110, True),
        (119, True),
        (119.1, True),
        (119.1, True),  # settled: grab here
        (1.5, True),
        (1.2, True),
        (15.0, True),
    ]
    actions = [p.feed(f, c, now=i * 0.125) for i, (f, c) in enumerate(trace)]
    assert actions[8] == "grab" and actions[-1] == "shrink" and actions.count("grab") == 1, actions
    assert p.phase == "done"
    late = Phases()  # the checkpoint file seen only after vLLM woke: the recent maximum still counts
    steps = ((0, 120, False), (1, 85, True), (2, 84, True), (3, 119, True), (3.1, 119, True), (3.3, 119, True))
    assert [late.feed(f, c, now=t) for t, f, c in steps] == [None] * 5 + ["grab"], late.phase
    q = Phases()  # a rollout that never ends: never grabs
    assert [q.feed(f, True) for f in (120, 80, 81, 82)] == [None] * 4 and q.phase == "wait_sleep"
    print("holder selftest ok")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "static":
        static(float(sys.argv[2]), float(sys.argv[3]))
    elif cmd == "after-ckpt":
        after_ckpt(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
    elif cmd == "selftest":
        selftest()
    else:
        raise SystemExit(__doc__)
