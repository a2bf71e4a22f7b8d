"""The newest committed rows of recently written streams, kept in memory so that live followers
(one read per wake-up each) do not each go back to SQLite for rows the writer just committed.

Only rows this store committed go in, after their commit, and streams it opened with no rows
(an append at seq 0 without events, as a chat completion's stream opens: its followers' first
reads need not ask SQLite for nothing); a stream's rows stay contiguous, so a read that the
memory cannot fully answer falls back to SQLite.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from itertools import islice
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omni.events.contract import StoredEvent


class RecentRows:
    def __init__(self, per_stream: int = 1024, streams: int = 2048):
        self._per_stream = per_stream
        self._streams = streams
        self._rows: OrderedDict[str, deque[StoredEvent]] = OrderedDict()

    def add(self, stored: Iterable[StoredEvent], opened: Iterable[str] = ()) -> None:
        """Committed rows; `opened`: streams committed empty in the same transaction."""
        if self._per_stream == 0:
            return
        for stream_id in opened:
            if stream_id not in self._rows:
                self._rows[stream_id] = deque(maxlen=self._per_stream)
        for event in sorted(stored, key=lambda e: (e.stream_id, e.seq)):
            rows = self._rows.get(event.stream_id)
            if rows is None:
                rows = self._rows[event.stream_id] = deque(maxlen=self._per_stream)
            else:
                self._rows.move_to_end(event.stream_id)
                if rows and rows[-1].seq + 1 != event.seq:
                    rows.clear()  # never leave a gap: only a contiguous tail is trusted
            rows.append(event)
        while len(self._rows) > self._streams:
            self._rows.popitem(last=False)

    def after(self, stream_id: str, after: int, limit: int | None) -> list[StoredEvent] | None:
        """Rows with seq > after (up to limit), or None when memory does not hold them all."""
        if self._per_stream == 0:
            return None
        rows = self._rows.get(stream_id)
        if rows is None or (rows and rows[0].seq > after + 1):
            return None
        if not rows:  # opened empty, nothing committed since
            return []
        start = max(0, after + 1 - rows[0].seq)
        stop = None if limit is None else start + limit
        return list(islice(rows, start, stop))

    def last(self, stream_id: str) -> StoredEvent | None:
        rows = self._rows.get(stream_id)
        return rows[-1] if rows else None

    def forget(self, stream_ids: Iterable[str]) -> None:
        for stream_id in stream_ids:
            self._rows.pop(stream_id, None)
