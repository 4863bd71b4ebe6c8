"""SwanLab's greeting in a verl log: the run's name and link (pure, linear in the line's length)."""

from __future__ import annotations


def _url_token(text: str) -> str | None:
    """``text`` when it is one ``http(s)://…`` token (no whitespace), else None."""
    for scheme in ("https://", "http://"):
        if text.startswith(scheme) and len(text) > len(scheme) and len(text.split(None, 1)) == 1:
            return text
    return None


def _name_and_url(rest: str) -> tuple[str, str | None] | None:
    """``<name> at[ <url>]`` (what follows ``View run ``) → (name, url); None when it is not that."""
    body = rest.rstrip()
    parts = body.rsplit(None, 1)
    if len(parts) == 2 and _url_token(parts[1]) and parts[0].endswith(" at"):
        return parts[0][:-3], parts[1]
    if body.endswith(" at"):
        return body[:-3], None
    return None


def swanlab_greeting(line: str) -> tuple[str, str | None, str | None] | None:
    r"""SwanLab 0.9's greeting (``sdk/internal/run/greeting.py``; an emoji sits between ``swanlab:`` and ``View``):
    ``swanlab: 🚀 View run <name> at <url>`` → ("run", name, url), ``swanlab: 🏠 View project at <url>`` →
    ("project", None, url); the URL is None when rich wrapped it onto the next line. None for any other line.

    String searches, not a regex: ``swanlab:.*View run (.*?) at(\s+https?://\S+)?\s*$`` was cubic on a crafted
    line (24 KB kept the supervisor busy 452 s, issue 27). The last ``View run `` (of the last three) / ``View project
    at`` after the first ``swanlab:`` that reads as a greeting is taken, as the regex's greedy ``.*`` did."""
    start = line.find("swanlab:")
    if start < 0:
        return None
    start += len("swanlab:")
    run_at = len(line)
    for _ in range(3):  # "View run View run at": the regex backtracked to an earlier one; a few, not all of them
        run_at = line.rfind("View run ", start, run_at + len("View run ") - 1)
        if run_at < start:
            break
        found = _name_and_url(line[run_at + len("View run ") :])
        if found is not None:
            return "run", found[0], found[1]
    project_at = line.rfind("View project at")
    if project_at >= start:
        tail = line[project_at + len("View project at") :]
        if not tail.strip():
            return "project", None, None
        if tail[0].isspace() and _url_token(tail.strip()):
            return "project", None, tail.strip()
    return None
