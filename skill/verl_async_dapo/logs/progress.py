"""Training progress from verl's console output (pure, incremental).

Fed the tail of a log or its live increments, never the whole file. It reads:

* verl's metrics line ``step:12 - actor/pg_loss:np.float64(-0.01) - timing_s/step:50.1 …``,
  which is authoritative for the step number (Ray forwards tqdm's bar by line, so it lags);
* tqdm's ``Training Progress:  12%|█▏   | 12/100 [10:00<1:13:20, 50.00s/it]``;
* ``Total training steps: N``, the resume / from-scratch lines, and SwanLab's greeting with
  the run URL (rich wraps a long greeting, so the URL may be alone on the next line);
* the start-up and in-step phase markers (logs/phases.py).

Parsing has a time budget when asked (``feed(…, budget_s=…)``, ``parse_progress(…, budget_s=…)``): once it is spent,
the rest of the text is skipped but for its last ``TAIL_ON_CUT_CHARS`` (where the latest step is), and the snapshot
says ``parsing_cut_short``. Every pattern is linear and every line is cut to ``MAX_LINE_CHARS`` (logs/text.py), so
this is the last guard, not the only one (issue 27: a crafted line froze the supervisor 452 s and ``status`` 4.5 min).

``feed(text, now=…)`` says when the text arrived (the supervisor follows the log live, so arrival is when
verl printed it): the phase's start time and the ETA from the wall clock between step lines come from
that. Text fed without ``now`` (a backlog, a tail read later) has no time and never counts towards a rate.
"""

from __future__ import annotations

import copy
import math
import re
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from verl_async_dapo.logs.greeting import swanlab_greeting
from verl_async_dapo.logs.phases import Phase, next_phase
from verl_async_dapo.logs.snapshot import MetricValue, ProgressSnapshot
from verl_async_dapo.logs.text import MAX_LINE_CHARS, clean_line, split_glued, strip_ansi

# Where the ETA's seconds-per-step come from, as said to the user (get_progress, CLI status).
ETA_WALL = "wall clock between step lines (includes validation and checkpoint time)"
ETA_TQDM = "tqdm's estimate"
ETA_TIMING = "timing_s/step (excludes validation and checkpoint time)"
# How many recent `timing_s/step` values the fallback ETA averages over.
RECENT_STEP_TIMES = 5
# A partial line longer than this is not a line verl prints; keep only its end.
MAX_PENDING_CHARS = 256 * 1024
# When the time budget runs out, this much of the text's end is still read (the latest step line and bar).
TAIL_ON_CUT_CHARS = 64 * 1024
BUDGET_CHECK_LINES = 64  # lines between two looks at the clock

# verl.md §8: one ` - `-separated field of the metrics line.
_FIELD_RE = re.compile(r"^([^:\s]+):(?:np\.\w+\()?([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)|True|False)\)?$")
# At the start of the line (or after a logging prefix ending in `]`): `step:` inside a
# message or a key such as `training/global_step:` is not the metrics line.
_STEP_RE = re.compile(r"(?:^\s*|\]\s*)step:(\d+)(?= - |\s*$)")
# Every variable part bounded: unbounded ``[^|]*`` / ``[^<\]]*`` rescan the rest of the line from each occurrence of
# "Training Progress:", quadratic on a line of repeated prefixes (tests/logs/test_regex_fuzz.py). tqdm's bar is at
# most a terminal wide, its times and rate a few characters.
_TQDM_RE = re.compile(
    r"Training Progress:\s*(?P<pct>\d{1,3})%\|[^|]{0,400}\|\s{0,8}(?P<n>\d{1,12})/(?P<total>\d{1,12})\s{0,8}"
    r"\[(?P<elapsed>[^<\]]{0,40})<(?P<remaining>[^,\]]{0,40}),\s{0,8}(?P<rate>[^\]]{0,80}?)\s{0,8}\]"
)
_INTERVAL_RE = re.compile(r"^(?:(\d+) days?, )?(?:(\d+):)?(\d+):(\d+)$")
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(s/it|it/s)$")
# verl's PPO trainer (``Total training steps: N``) and its SFT trainer (``Number of steps/epoch 35, number of
# epochs 3, total number of steps 105``, tests/logs/real/verl-sft-char-count-glued-tqdm.log).
_TOTAL_STEPS_RE = re.compile(r"(?:Total training steps:|total number of steps)\s*(\d+)")
_RESUME_RES = (
    re.compile(r"Setting global step to (\d+)"),
    re.compile(r"Load from checkpoint folder: \S*global_step_(\d+)"),
    re.compile(r"Resuming from \S*global_step_(\d+)"),
)
_URL_LINE_RE = re.compile(r"^\s*(https?://\S+)\s*$")


def parse_metric_value(text: str) -> MetricValue:
    """`True`/`False` → bool, an integer literal → int, anything else the regex allows → float."""
    if text == "True":
        return True
    if text == "False":
        return False
    if any(marker in text for marker in (".", "e", "E", "n")):  # `n`: nan and inf
        return float(text)
    return int(text)


def parse_metrics_line(line: str) -> tuple[int, dict[str, MetricValue]] | None:
    """`step:N - k:v - …` → (N, {k: v}); None if the line is not a metrics line."""
    if "step:" not in line:
        return None
    match = _STEP_RE.search(line)
    if match is None:
        return None
    metrics: dict[str, MetricValue] = {}
    for part in line[match.end() :].split(" - "):
        found = _FIELD_RE.match(part.strip())
        if found is not None and found.group(1) != "step":
            metrics[found.group(1)] = parse_metric_value(found.group(2))
    return int(match.group(1)), metrics


def parse_interval(text: str) -> float | None:
    """tqdm's `MM:SS`, `H:MM:SS` or `N days, H:MM:SS`; `?` (unknown) → None."""
    match = _INTERVAL_RE.match(text.strip())
    if match is None:
        return None
    days, hours, minutes, seconds = (int(group) if group else 0 for group in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def parse_rate(text: str) -> float | None:
    """tqdm's rate as seconds per step: `50.00s/it` → 50.0, `2.00it/s` → 0.5, `?it/s` → None."""
    match = _RATE_RE.match(text.strip())
    if match is None:
        return None
    value = float(match.group(1))
    if match.group(2) == "s/it":
        return value
    return 1.0 / value if value > 0 else None


@dataclass
class _TqdmState:
    n: int
    total: int
    percent: float
    remaining_s: float | None
    seconds_per_it: float | None


@dataclass
class _State:
    step: int | None = None
    total_steps: int | None = None
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_STEP_TIMES))
    tqdm: _TqdmState | None = None
    swanlab_url: str | None = None
    swanlab_project_url: str | None = None
    swanlab_run_name: str | None = None
    # Which greeting line is waiting for its URL on the next line ("run" / "project").
    awaiting_url: str | None = None
    resumed_from_step: int | None = None
    training_from_scratch: bool = False
    phase: Phase = Phase.STARTING
    phase_since: float | None = None
    any_line: bool = False  # the phase is None until the log has said anything
    # The attempt's start-up as it went (issue 31): each phase entered before the first step line, with the time
    # its marker arrived, and when training began. Only text fed with a time counts (a backlog has none).
    startup_marks: list[tuple[str, float]] = field(default_factory=list)
    training_since: float | None = None
    save_seconds: float | None = None  # the latest timing_s/save_checkpoint
    # timing_s/step of this attempt's steps after its first (the first carries the warm-up: 40 s vs 1.7 s on the
    # H200): the attempt's steady pace, what a memory feature's price is measured on.
    first_metrics_step: int | None = None
    steady_step_times: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_STEP_TIMES))
    tracker_skipped: bool = False
    cut_short: bool = False
    # When the text being consumed arrived (None: unknown), and the first / latest step line seen with a time.
    now: float | None = None
    first_timed: tuple[int, float] | None = None
    last_timed: tuple[int, float] | None = None

    def consume(self, raw: str) -> None:
        raw = raw[: 2 * MAX_LINE_CHARS]  # bounded before any pattern: colours and a prefix fit in the margin
        line = clean_line(raw)
        if not line.strip():
            return
        # A metrics line (long: 100+ fields) is never a phase marker; it sets "training" itself.
        found = None if "step:" in line else next_phase(self.phase, raw, line, training_started=self.step is not None)
        if found is not None and found is not self.phase:
            self.phase, self.phase_since = found, self.now
            self._mark_startup(found)
        elif not self.any_line:
            self._mark_startup(self.phase)  # the first line, no marker: the attempt is starting (or queued)
        self.any_line = True
        if "skip write latest_checkpointed_iteration" in line:
            self.tracker_skipped = True
        if self.awaiting_url is not None:
            self._take_wrapped_url(line)
        if "step:" in line:
            self._take_metrics(line)
        if "Training Progress" in line:
            self._take_tqdm(line)
        if "swanlab" in line:
            self._take_swanlab(line)
        if "Total training steps" in line or "total number of steps" in line:
            found = _TOTAL_STEPS_RE.search(line)
            if found is not None:
                self.total_steps = int(found.group(1))
        if "global step to" in line or "checkpoint folder" in line or "Resuming from" in line:
            self._take_resume(line)
        if "Training from scratch" in line:
            self.training_from_scratch = True
            self.resumed_from_step = None

    def _take_metrics(self, line: str) -> None:
        parsed = parse_metrics_line(line)
        if parsed is None:
            return
        self.step, self.metrics = parsed
        if self.phase is not Phase.TRAINING:
            self.phase, self.phase_since = Phase.TRAINING, self.now
        if self.training_since is None and self.startup_marks and self.now is not None:
            self.training_since = self.now  # the first step's line: the start-up is over
        if self.now is not None and (self.last_timed is None or self.step > self.last_timed[0]):
            self.last_timed = (self.step, self.now)
            self.first_timed = self.first_timed or self.last_timed
        saved = self.metrics.get("timing_s/save_checkpoint")
        if isinstance(saved, (int, float)) and not isinstance(saved, bool) and math.isfinite(saved) and saved >= 0:
            self.save_seconds = float(saved)
        step_time = self.metrics.get("timing_s/step", self.metrics.get("perf/time_per_step"))
        is_number = isinstance(step_time, (int, float)) and not isinstance(step_time, bool)
        if is_number and math.isfinite(step_time) and step_time > 0:
            self.step_times.append(float(step_time))
            if self.first_metrics_step is None:
                self.first_metrics_step = self.step
            elif self.step > self.first_metrics_step:
                self.steady_step_times.append(float(step_time))

    def _mark_startup(self, phase: Phase) -> None:
        """A start-up phase began now; nothing once training has begun, or without a time."""
        if self.now is None or self.training_since is not None or phase in (Phase.TRAINING, Phase.FINISHING):
            return
        if not self.startup_marks or self.startup_marks[-1][0] != phase.value:
            self.startup_marks.append((phase.value, self.now))

    def _take_tqdm(self, line: str) -> None:
        match = _TQDM_RE.search(line)
        if match is None:
            return
        total = int(match.group("total"))
        self.tqdm = _TqdmState(
            n=int(match.group("n")),
            total=total,
            percent=float(match.group("pct")),
            remaining_s=parse_interval(match.group("remaining")),
            seconds_per_it=parse_rate(match.group("rate")),
        )
        self.total_steps = total

    def _take_swanlab(self, line: str) -> None:
        found = swanlab_greeting(line)
        if found is None:
            return
        which, name, url = found
        if which == "run":
            self.swanlab_run_name = (name or "").strip() or None
            if url:
                self._set_run_url(url)
            else:
                self.awaiting_url = "run"
        elif url:
            self.swanlab_project_url = url
        else:
            self.awaiting_url = "project"

    def _take_wrapped_url(self, line: str) -> None:
        waiting, self.awaiting_url = self.awaiting_url, None
        match = _URL_LINE_RE.match(line)
        if match is None:
            return
        if waiting == "run":
            self._set_run_url(match.group(1))
        else:
            self.swanlab_project_url = match.group(1)

    def _set_run_url(self, url: str) -> None:
        self.swanlab_url = url
        if "/runs/" in url:
            self.swanlab_project_url = url.split("/runs/")[0]

    def _take_resume(self, line: str) -> None:
        for pattern in _RESUME_RES:
            found = pattern.search(line)
            if found is not None:
                self.resumed_from_step = int(found.group(1))
                self.training_from_scratch = False
                return

    def wall_seconds_per_step(self) -> float | None:
        """Wall-clock seconds per step between the first and the latest timed step line: the first step's own
        warm-up (before its line) is left out, validation and checkpoint time between steps are counted in."""
        first, last = self.first_timed, self.last_timed
        if first is None or last is None or last[0] <= first[0] or last[1] <= first[1]:
            return None
        return (last[1] - first[1]) / (last[0] - first[0])

    def seconds_per_step(self) -> float | None:
        if self.step_times:
            return sum(self.step_times) / len(self.step_times)
        return self.tqdm.seconds_per_it if self.tqdm is not None else None

    def snapshot(self) -> ProgressSnapshot:
        bar = self.tqdm
        step = self.step if self.step is not None else (bar.n if bar is not None else None)
        total = self.total_steps
        wall = self.wall_seconds_per_step()
        per_step = wall if wall is not None else self.seconds_per_step()
        percent: float | None = None
        if step is not None and total:
            percent = round(min(100.0, 100.0 * step / total), 2)
        elif bar is not None:
            percent = bar.percent
        eta: float | None = None
        basis: str | None = None
        if wall is not None and step is not None and total is not None:
            eta, basis = round(max(total - step, 0) * wall, 1), ETA_WALL
        # tqdm's own estimate is only trusted when its bar has caught up with the step lines.
        elif bar is not None and bar.remaining_s is not None and (self.step is None or bar.n == self.step):
            eta, basis = bar.remaining_s, ETA_TQDM
        elif step is not None and total is not None and per_step is not None:
            eta = round(max(total - step, 0) * per_step, 1)
            basis = ETA_TIMING if self.step_times else ETA_TQDM
        if step is not None and total is not None and step >= total:
            eta = 0.0
        return ProgressSnapshot(
            step=step,
            total_steps=total,
            percent=percent,
            eta_seconds=eta,
            seconds_per_step=round(per_step, 3) if per_step is not None else None,
            metrics=dict(self.metrics),
            metrics_step=self.step,
            swanlab_url=self.swanlab_url,
            swanlab_project_url=self.swanlab_project_url,
            swanlab_run_name=self.swanlab_run_name,
            resumed_from_step=self.resumed_from_step,
            training_from_scratch=self.training_from_scratch,
            phase=self.phase.value if self.any_line else None,
            phase_since=self.phase_since,
            eta_basis=basis,
            tracker_skipped=self.tracker_skipped,
            parsing_cut_short=self.cut_short,
            startup_marks=tuple(self.startup_marks),
            training_since=self.training_since,
            save_checkpoint_seconds=self.save_seconds,
            steady_seconds_per_step=round(statistics.median(self.steady_step_times), 3) if self.steady_step_times else None,
            steady_steps=len(self.steady_step_times),
        )


class ProgressParser:
    """Feed it log text in chunks of any size; ask for a snapshot at any time.

    Complete lines are consumed as they arrive; a partial last line is kept until its line
    break comes. snapshot() also reads that partial line (on a copy of the state), because
    tqdm's latest redraw has no line break after it until the next redraw.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._state = _State()
        self._pending = ""
        self._clock = clock  # for the time budget only

    def feed(self, text: str, now: float | None = None, budget_s: float | None = None) -> None:
        """Consume ``text``; ``now``: when it arrived (Unix time), None when unknown (a backlog); ``budget_s``: the
        most seconds to spend on it (then its end only is read, and the snapshot says ``parsing_cut_short``)."""
        if not text:
            return
        self._state.now = now
        data = self._pending + text
        last_break = max(data.rfind("\n"), data.rfind("\r"))
        if last_break < 0:
            self._pending = data[-MAX_PENDING_CHARS:]
            return
        self._pending = data[last_break + 1 :][-MAX_PENDING_CHARS:]
        lines = data[:last_break].replace("\r\n", "\n").replace("\r", "\n").split("\n")
        deadline = None if budget_s is None else self._clock() + budget_s
        for index, raw in enumerate(lines):
            if deadline is not None and index % BUDGET_CHECK_LINES == 0 and self._clock() > deadline:
                self._state.cut_short = True
                for tail_line in _last_chars(lines[index:], TAIL_ON_CUT_CHARS):
                    _consume_glued(self._state, tail_line)
                return
            _consume_glued(self._state, raw)

    def snapshot(self) -> ProgressSnapshot:
        if not self._pending:
            return self._state.snapshot()
        state = copy.deepcopy(self._state)
        _consume_glued(state, self._pending)
        return state.snapshot()


def _last_chars(lines: list[str], limit: int) -> list[str]:
    """The whole lines at the end of ``lines`` that fit in ``limit`` characters."""
    size, start = 0, len(lines)
    while start > 0 and size + len(lines[start - 1]) + 1 <= limit:
        start -= 1
        size += len(lines[start]) + 1
    return lines[start:]


def _consume_glued(state: _State, raw: str) -> None:
    """One physical segment, cut where a Ray prefix glued another line on (``…2.50it/s](TaskRunner pid=196)
    step:7 - …`` after tqdm's newline-less redraw): each piece is a line of its own."""
    for piece in split_glued(strip_ansi(raw)) if "pid=" in raw else (raw,):
        state.consume(piece)


def parse_progress(
    text: str, budget_s: float | None = None, clock: Callable[[], float] = time.monotonic
) -> ProgressSnapshot:
    """One-shot: the progress a log (tail) shows, within ``budget_s`` seconds when given (see ``feed``)."""
    parser = ProgressParser(clock)
    parser.feed(text, budget_s=budget_s)
    return parser.snapshot()
