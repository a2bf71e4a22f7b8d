"""What `omni db check` and `omni db purge` print, whichever store holds the log."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from omni.events.checks import Problem
from omni.events.maintenance import Finished


def checked(where: str, problems: Sequence[Problem], streams: int, rows: int) -> int:
    """A check's findings, one a line, then its verdict; the exit status."""
    for p in problems:
        print(f"{p.stream_id or where}: {p.what}")
    if problems:
        print(f"omni: {where}: {len(problems)} problems")
        return 1
    print(f"omni: {where} is sound ({rows} events in {streams} streams)")
    return 0


def would_remove(doomed: Sequence[Finished], count_events: Callable[[list[str]], int]) -> int:
    """A dry run's list: what a purge would remove, one a line, and how many events."""
    for f in doomed:
        ended = datetime.fromtimestamp(f.ended_at / 1000).isoformat(timespec="seconds")
        print(f"{f.id}\t{f.status}\t{ended}")
    events = count_events([f.id for f in doomed])
    print(f"omni: would remove {objects(doomed)}: {events} events")
    return 0


def objects(doomed: Sequence[Finished]) -> str:
    responses = sum(f.id.startswith("resp_") for f in doomed)
    return f"{responses} responses, {len(doomed) - responses} completions"
