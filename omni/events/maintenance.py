"""Operating the log, in words both backends share (omni/events/sqlite/maintenance.py and
omni/events/postgres/maintenance.py run the SQL; omni/events/checks.py says what a check
finds): what a purge may remove, the streams an object owns, and the durations and moments
`omni db` and retention are given. The events layer names no event types: what ends a stream
and what deletes an object come in a `Vocabulary` from the caller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# The internal streams an object owns besides its own.
SUFFIXES = ("/request", "/tokens", "/progress")
# Objects one purge transaction removes (the CLI's and retention's): appends wait for one at most.
PER_TRANSACTION = 256
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """`ends`: each terminal event type and the status it means (a value starting with "$."
    is a JSON path to the status in the event's data); `deleted`: tombstone types;
    `accepted`: the type that opens every /request stream; `closed`: tombstones that end an
    object with no ending of its own (a conversation), "deleted" once written."""

    ends: Mapping[str, str]
    deleted: frozenset[str]
    accepted: str
    closed: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Finished:
    """An object a purge may remove: its public id, final status and when it ended (ms)."""

    id: str
    status: str
    ended_at: int


def parse_duration(text: str) -> float:
    """'30d', '12h', '90m', '45s', '2w' (or '1d12h') as seconds, else ValueError."""
    spec = text.strip().lower()
    parts = _DURATION.findall(spec)
    if not parts or "".join(n + u for n, u in parts) != spec:
        raise ValueError(f"{text!r}: expected a duration such as 30d, 12h, 90m or 45s")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def parse_moment(text: str) -> int:
    """An ISO 8601 date or date-time (local time unless it names a zone) as unix ms."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r}: expected an ISO date such as 2025-01-31") from None
    return int(moment.timestamp() * 1000)  # a naive value is read as local time


def streams_of(ids: Iterable[str]) -> list[str]:
    """Every stream the objects `ids` own."""
    return [s for oid in ids for s in (oid, *(oid + suffix for suffix in SUFFIXES))]


def finished_of(
    rows: Iterable[Any], vocabulary: Vocabulary, statuses: Iterable[str] | None
) -> list[Finished]:
    """The purge listing's rows (id, terminal type, the status its data says, deleted, when
    it ended) with the given statuses ("deleted" wins over the final one)."""
    wanted = None if statuses is None else set(statuses)
    found = []
    for oid, type_, said, deleted, done in rows:
        status = "deleted" if deleted or type_ is None else vocabulary.ends[type_]
        status = str(said) if status.startswith("$.") else status
        if wanted is None or status in wanted:
            found.append(Finished(oid, status, int(done)))
    return found
