"""Console output the way a verl driver shows it: Ray-prefixed lines, tqdm's bar, verl's metric formatting."""

from __future__ import annotations

import numbers
import sys
import time
from pprint import pformat
from typing import Any, TextIO


class NpFloat64(float):
    """Prints like numpy>=2's ``np.float64`` (verl's means come from ``np.mean``) without importing numpy."""

    def __repr__(self) -> str:
        return f"np.float64({float.__repr__(self)})"


def concat_dict_to_str(data: dict[str, Any], step: int) -> str:
    """verl.utils.logger.aggregate_logger.concat_dict_to_str: numbers only, each through pprint.pformat."""
    output = [f"step:{step}"]
    output += [f"{k}:{pformat(v)}" for k, v in data.items() if isinstance(v, numbers.Number)]
    return " - ".join(output)


class RayOut:
    """Prints as the Ray driver does: actor output carries ``(ClassName pid=N)`` on every forwarded line."""

    def __init__(self, runner: str, runner_pid: int, worker_pid: int, stream: TextIO | None = None) -> None:
        self.runner_name = runner
        self.runner_pid = runner_pid
        self.worker_pid = worker_pid
        self.stream = stream  # one stream for both (a log file, as a launcher's 2>&1 makes it); None: stdout/stderr

    @property
    def stdout(self) -> TextIO:
        return self.stream or sys.stdout

    @property
    def stderr(self) -> TextIO:
        return self.stream or sys.stderr

    @staticmethod
    def _emit(prefix: str, text: str, stream: TextIO) -> None:
        for line in text.split("\n"):
            stream.write(f"{prefix}{line}\n")
        stream.flush()

    def runner(self, text: str, err: bool = False) -> None:
        self._emit(f"({self.runner_name} pid={self.runner_pid}) ", text, self.stderr if err else self.stdout)

    def worker(self, text: str, err: bool = False) -> None:
        self._emit(f"(WorkerDict pid={self.worker_pid}) ", text, self.stderr if err else self.stdout)

    def driver(self, text: str, err: bool = True) -> None:
        self._emit("", text, self.stderr if err else self.stdout)

    def runner_pprint(self, obj: Any) -> None:
        """verl pprints dicts and f-strings; a long string comes out as a parenthesised run of fragments."""
        self.runner(pformat(obj))


def format_interval(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class ProgressBar:
    """tqdm(total=..., initial=global_steps, desc="Training Progress") rendered to stderr.

    tqdm writes ``\\r`` + bar on each update; Ray's log monitor forwards whatever the worker wrote when it polls,
    prefixed once, so the driver shows ``(TaskRunner pid=N) \\rTraining Progress: ...`` per update.
    """

    CHARSET = " ▏▎▍▌▋▊▉█"
    WIDTH = 10  # tqdm's bar width when the output is not a terminal

    def __init__(
        self, out: RayOut, total: int, initial: int, desc: str = "Training Progress", glue_from: int | None = None
    ) -> None:
        self.out, self.total, self.initial, self.desc = out, total, initial, desc
        # The redraw before step ``glue_from``'s line and every later one ends without a newline: the next line
        # printed (the metrics line, from stdout into the same log) lands on the bar's line.
        self.glue_from = glue_from
        self.n = initial
        self.started = time.monotonic()
        self._render()

    def bar(self) -> str:
        frac = min(max(self.n / self.total, 0.0), 1.0) if self.total else 0.0
        nsyms = len(self.CHARSET) - 1
        full, part = divmod(int(frac * self.WIDTH * nsyms), nsyms)
        text = "█" * full
        if full < self.WIDTH:
            text += self.CHARSET[part]
        return text.ljust(self.WIDTH)

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        done = self.n - self.initial
        rate = done / elapsed if done > 0 and elapsed > 0 else None
        if rate is None:
            remaining, rate_text = "?", "?it/s"
        else:
            remaining = format_interval((self.total - self.n) / rate)
            rate_text = f"{1 / rate:5.2f}s/it" if rate < 1 else f"{rate:5.2f}it/s"
        percent = 100.0 * self.n / self.total if self.total else 0.0
        return (
            f"{self.desc}: {percent:3.0f}%|{self.bar()}| {self.n}/{self.total} "
            f"[{format_interval(elapsed)}<{remaining}, {rate_text}]"
        )

    def _render(self) -> None:
        glued = self.glue_from is not None and self.n + 1 >= self.glue_from
        stream = self.out.stderr
        stream.write(f"({self.out.runner_name} pid={self.out.runner_pid}) \r{self.line()}{'' if glued else chr(10)}")
        stream.flush()

    def update(self, count: int = 1) -> None:
        self.n += count
        self._render()

    def close(self) -> None:
        self._render()
