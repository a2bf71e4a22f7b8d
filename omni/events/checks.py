"""What a check of the log finds, in words both backends share: each dialect's check
(omni/events/sqlite/maintenance.py, omni/events/postgres/maintenance.py) runs its SQL, and
the rows mean the same here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Problem:
    stream_id: str  # "" for the file as a whole
    what: str


def stream_problems(rows: Iterable[Any]) -> list[Problem]:
    """What the check's per-stream rows say: (stream_id, min seq, max seq, rows, terminal
    events, the seq of the last terminal event), one for each stream out of order."""
    found: list[Problem] = []
    for sid, low, high, count, terminals, last_end in rows:
        if low != 0 or high != count - 1:
            found.append(Problem(sid, f"seq not contiguous from 0: {count} rows, {low}..{high}"))
        if "/" in sid:
            continue  # terminal events end public streams only
        if terminals > 1:
            found.append(Problem(sid, f"{terminals} terminal events"))
        if last_end is not None and last_end != high:
            found.append(Problem(sid, f"events after the terminal event at seq {last_end}"))
    return found


def request_problems(rows: Iterable[Any]) -> list[Problem]:
    """Public streams whose /request stream is missing or opens wrong: (stream_id, its first
    type or None)."""
    return [
        Problem(sid, "no /request stream" if first is None else f"/request opens with {first}")
        for sid, first in rows
    ]


def cache_problems(rows: Iterable[Any]) -> list[Problem]:
    """Replay-cache rows that point at no stream: (key, completion_id)."""
    return [Problem(cid, f"replay-cache entry {key[:16]} points at no stream") for key, cid in rows]
