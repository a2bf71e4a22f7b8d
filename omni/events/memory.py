"""The log and its cache index in this process's memory (omni/events/contract.py): what the
service layer's tests run on, and the contract tests' second backend. Nothing survives the
process; every method commits or reads without awaiting anything, so each is atomic on the
event loop.

The two indexes are kept as the SQLite schema's triggers keep them (migrations 0003, 0004
and 0012), in the append or purge that changes them, on the event types those triggers name.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from omni.errors import SeqConflict, StoreError
from omni.events import maintenance
from omni.events.contract import Append, StoredEvent
from omni.events.driver import now_ms
from omni.vocabulary import ACCEPTED, COMPLETION_DELETED, COMPLETION_USAGE, MESSAGE_STOP

ITEM_DONE = "response.output_item.done"
USAGE = COMPLETION_USAGE["chat"]  # a chat completion's end: replayable from then on
REPLAYABLE = frozenset({USAGE, MESSAGE_STOP})  # and a message's
REQUEST = "/request"


class MemoryStore:
    """Streams of events in position order, each stream in seq order, with the item index
    and the replay-cache index (bounded by entries and age, as the SQLite store's)."""

    def __init__(self, *, cache_max_entries: int = 1024, cache_max_age_s: float = 86400.0):
        self._events: dict[int, StoredEvent] = {}  # by position, in position order
        self._streams: dict[str, list[StoredEvent]] = {}  # each in seq order
        self._position = 0  # the last one given: never reused
        self._items: dict[str, dict[int, str]] = {}  # item id -> position -> its holder
        self._held: dict[int, list[str]] = {}  # position -> the item ids its event holds
        self.cache = MemoryCacheIndex(self, cache_max_entries, int(cache_max_age_s * 1000))
        self.leases = MemoryLeases()

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def append(self, appends: Iterable[Append]) -> list[StoredEvent]:
        now = now_ms()
        rows = [
            (a.stream_id, a.first_seq + i, e.type, e.data)
            for a in appends
            for i, e in enumerate(a.events)
        ]
        self._check(rows)
        stored = []
        for stream_id, seq, type_, data in rows:
            self._position += 1
            event = StoredEvent(self._position, stream_id, seq, type_, data, now)
            self._events[event.position] = event
            stream = self._streams.setdefault(stream_id, [])
            stream.insert(bisect.bisect(stream, seq, key=lambda e: e.seq), event)
            self._index_items(event)
            self.cache.added(event)
            stored.append(event)
        self.cache.bound(now)
        return stored

    def _check(self, rows: list[tuple[str, int, str, str]]) -> None:
        """Refuse the whole append before any of it is written, as the table would."""
        taken: set[tuple[str, int]] = set()
        for stream_id, seq, type_, data in rows:
            key = (stream_id, seq)
            if key in taken or self._at(stream_id, seq) is not None:
                raise SeqConflict(
                    "append conflict: UNIQUE constraint failed: events.stream_id, events.seq"
                )
            taken.add(key)
            try:
                (stream_id + type_ + data).encode()  # what SQLite could not store either
            except UnicodeEncodeError as exc:
                raise StoreError(f"append failed: {exc}") from exc

    def _at(self, stream_id: str, seq: int) -> StoredEvent | None:
        stream = self._streams.get(stream_id, [])
        i = bisect.bisect_left(stream, seq, key=lambda e: e.seq)
        return stream[i] if i < len(stream) and stream[i].seq == seq else None

    def _index_items(self, event: StoredEvent) -> None:
        """Migration 0003's triggers: an accepted request's input items, an output item."""
        if event.type == ACCEPTED:
            inputs = _path(event.data, "$.input")
            listed = inputs if isinstance(inputs, list) else []
            holder = event.stream_id[: -len(REQUEST)]
            ids = [i.get("id") for i in listed if isinstance(i, dict)]
        elif event.type == ITEM_DONE:
            holder, ids = event.stream_id, [_path(event.data, "$.item.id")]
        else:
            return
        for item_id in dict.fromkeys(i for i in ids if isinstance(i, str)):
            self._items.setdefault(item_id, {})[event.position] = holder
            self._held.setdefault(event.position, []).append(item_id)

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        stream = self._streams.get(stream_id, [])
        start = bisect.bisect(stream, after, key=lambda e: e.seq)
        return stream[start : None if limit is None else start + limit]

    async def last(self, stream_id: str) -> StoredEvent | None:
        stream = self._streams.get(stream_id)
        return stream[-1] if stream else None

    async def next_seq(self, stream_id: str) -> int:
        stream = self._streams.get(stream_id)
        return stream[-1].seq + 1 if stream else 0

    async def by_type(self, type_: str, after_position: int = 0) -> list[StoredEvent]:
        return [e for e in self._events.values() if e.type == type_ and e.position > after_position]

    async def unfinished(self, first_type: str, end_types: Sequence[str]) -> list[str]:
        ends = set(end_types)
        return [
            e.stream_id
            for e in self._events.values()
            if e.seq == 0
            and e.type == first_type
            and not any(row.type in ends for row in self._streams[e.stream_id])
        ]

    async def streams_with(self, type_: str, facts: Sequence[tuple[str, object]]) -> list[str]:
        return [
            e.stream_id
            for e in self._events.values()
            if e.type == type_ and any(_holds(e.data, path, value) for path, value in facts)
        ]

    async def item_holders(self, item_id: str) -> list[str]:
        holders = self._items.get(item_id, {})
        return [holders[position] for position in sorted(holders)]

    async def purge(self, stream_ids: Sequence[str]) -> int:
        removed = 0
        for stream_id in dict.fromkeys(stream_ids):
            for event in self._streams.pop(stream_id, []):
                del self._events[event.position]
                self._forget_items(event.position)
                self.cache.removed(event)
                removed += 1
        return removed

    def _forget_items(self, position: int) -> None:
        for item_id in self._held.pop(position, ()):
            holders = self._items[item_id]
            del holders[position]
            if not holders:
                del self._items[item_id]

    async def purge_objects(self, ids: Sequence[str]) -> int:
        return await self.purge(maintenance.streams_of(ids))

    def request_of(self, completion_id: str) -> StoredEvent | None:
        """The accepted request that opens a completion's /request stream, if there is one."""
        opening = self._at(completion_id + REQUEST, 0)
        return opening if opening is not None and opening.type == ACCEPTED else None

    def deleted(self, completion_id: str) -> bool:
        return any(
            e.type == COMPLETION_DELETED for e in self._streams.get(completion_id + REQUEST, ())
        )


@dataclass(slots=True)
class _Entry:
    key: str
    created_at: int
    order: int  # insertion order: SQLite's rowid


class MemoryCacheIndex:
    """Migration 0004's (and 0012's) triggers over the memory store's appends and purges, and
    the SQLite store's bounds: the newest `max_entries` (-1: no bound) within `max_age_ms`."""

    def __init__(self, store: MemoryStore, max_entries: int, max_age_ms: int):
        self._store = store
        self.max_entries = max_entries
        self.max_age_ms = max_age_ms
        self._entries: dict[str, _Entry] = {}  # completion id -> its entry
        self._added = 0
        self._changed = False  # by the append under way

    def added(self, event: StoredEvent) -> None:
        """What an appended event changes: a usage chunk or a message's stop indexes, a
        tombstone removes."""
        if event.type in REPLAYABLE:
            self._index(event)
        elif event.type == COMPLETION_DELETED:
            self._changed |= self._entries.pop(event.stream_id[: -len(REQUEST)], None) is not None

    def removed(self, event: StoredEvent) -> None:
        """A purged stream's seq 0 takes its completion's entry along."""
        if event.seq == 0:
            self._entries.pop(event.stream_id.removesuffix(REQUEST), None)

    def _index(self, end: StoredEvent) -> None:
        cid = end.stream_id
        request = self._store.request_of(cid)
        if request is None or cid in self._entries or self._store.deleted(cid):
            return
        key = _path(request.data, "$.key")
        if key is None or _path(request.data, "$.mirror_of") is not None:
            return
        if not _equal(_path(request.data, "$.body.store"), 1):
            return
        self._added += 1
        self._entries[cid] = _Entry(str(key), end.created_at, self._added)
        self._changed = True

    def bound(self, now: int) -> None:
        """After an append that changed the index: what is past its age, then all but the
        newest max_entries, go."""
        if not self._changed:
            return
        self._changed = False
        cutoff = now - self.max_age_ms
        self._entries = {c: e for c, e in self._entries.items() if e.created_at >= cutoff}
        if self.max_entries >= 0:
            newest = sorted(self._entries.items(), key=lambda ce: (ce[1].created_at, ce[1].order))
            self._entries = dict(newest[len(newest) - min(self.max_entries, len(newest)) :])

    async def lookup(self, key: str) -> str | None:
        cutoff = now_ms() - self.max_age_ms
        found = [
            (e.created_at, e.order, cid)
            for cid, e in self._entries.items()
            if e.key == key and e.created_at >= cutoff
        ]
        return max(found)[2] if found else None

    async def size(self) -> int:
        return len(self._entries)

    async def rebuild(self) -> int:
        self._entries.clear()
        ends = [e for t in sorted(REPLAYABLE) for e in await self._store.by_type(t)]
        for event in sorted(ends, key=lambda e: e.position):
            self._index(event)
        self._changed = True
        self.bound(now_ms())
        return len(self._entries)


def _path(data: str, path: str) -> Any:
    """SQLite's json_extract for a path of object keys ("$.a.b"); None where it is NULL."""
    try:
        found = json.loads(data)
    except ValueError:
        return None
    for name in path.removeprefix("$.").split("."):
        if not isinstance(found, dict):
            return None
        found = found.get(name)
    return found


def _equal(found: Any, value: object) -> bool:
    """SQL's `=` between an extracted JSON value and a parameter (true and false are 1 and
    0, NULL equals nothing, a string no number)."""
    if found is None or isinstance(found, dict | list):
        return False
    return isinstance(found, str) == isinstance(value, str) and bool(found == value)


def _holds(data: str, path: str, value: object) -> bool:
    return _equal(_path(data, path), value)


class MemoryLeases:
    """Leases (contract.py) in a dict: stream -> (owner, expiry in ms)."""

    def __init__(self) -> None:
        self._leases: dict[str, tuple[str, int]] = {}

    async def claim(self, stream_ids: Sequence[str], owner: str, ttl_ms: int) -> list[str]:
        now = now_ms()
        taken = []
        for stream_id in stream_ids:
            held = self._leases.get(stream_id)
            if held is None or held[1] < now or held[0] == owner:
                self._leases[stream_id] = (owner, now + ttl_ms)
                taken.append(stream_id)
        return taken

    async def renew(self, owner: str, ttl_ms: int) -> int:
        mine = [s for s, (o, _) in self._leases.items() if o == owner]
        for stream_id in mine:
            self._leases[stream_id] = (owner, now_ms() + ttl_ms)
        return len(mine)

    async def release(self, stream_ids: Sequence[str], owner: str) -> None:
        for stream_id in stream_ids:
            if self._leases.get(stream_id, ("", 0))[0] == owner:
                del self._leases[stream_id]

    async def expired(self) -> list[str]:
        now = now_ms()
        gone = [(e, s) for s, (_, e) in self._leases.items() if e < now]
        return [s for _, s in sorted(gone)]

    async def holder(self, stream_id: str) -> tuple[str, int] | None:
        return self._leases.get(stream_id)

    async def settle(self) -> None:
        """Nothing to wait for: an append to memory is whole once it returns."""
