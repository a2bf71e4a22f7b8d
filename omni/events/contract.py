"""What every backend of the log promises: the values that cross it and two narrow interfaces,
the event log and the replay-cache index (the SQLite store and the in-memory one honour them,
tests/events/test_contract.py holds each to them; a PostgreSQL one joins with a fixture).

The log's guarantees: (stream_id, seq) is unique, and an append that would take a seq twice
is refused whole with SeqConflict; an append of several streams commits all or nothing;
positions grow in commit order and are never reused; every other failure is a StoreError.
The log does not fill gaps or check them: a stream's writer appends at next_seq (the
Appender keeps a failed stream from going on past its gap).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class NewEvent:
    type: str
    data: str  # JSON text, exactly the bytes a client will see


@dataclass(frozen=True, slots=True)
class Append:
    """Events for one stream; `first_seq` is the seq the first of them must get."""

    stream_id: str
    first_seq: int
    events: Sequence[NewEvent]


@dataclass(frozen=True, slots=True)
class StoredEvent:
    position: int
    stream_id: str
    seq: int
    type: str
    data: str
    created_at: int


class EventLog(Protocol):
    """Streams of events in one global order: append, read back, find, purge on purpose."""

    async def open(self) -> None: ...

    async def close(self) -> None:
        """What was handed to the log before commits first."""

    async def append(self, appends: Iterable[Append]) -> list[StoredEvent]:
        """Append to one or more streams in ONE transaction; all or nothing."""

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events of one stream with seq > after, in seq order."""

    async def last(self, stream_id: str) -> StoredEvent | None:
        """The newest event of a stream, or None for an empty stream."""

    async def next_seq(self, stream_id: str) -> int:
        """One past the stream's highest seq (0 for an empty stream)."""

    async def by_type(self, type_: str, after_position: int = 0) -> list[StoredEvent]:
        """Every event of one type with position > after_position, in log order."""

    async def unfinished(self, first_type: str, end_types: Sequence[str]) -> list[str]:
        """Streams that began with `first_type` and hold none of `end_types`, in log order."""

    async def streams_with(self, type_: str, facts: Sequence[tuple[str, object]]) -> list[str]:
        """Streams with an event of `type_` whose JSON data holds one of `facts` (a JSON path
        and its value; true and false read as 1 and 0), in log order."""

    async def item_holders(self, item_id: str) -> list[str]:
        """The objects whose events hold an item with this id, the first to hold it first: an
        accepted request's input items (its object is the /request stream's owner) and each
        `response.output_item.done`'s item, indexed in the append that writes them."""

    async def purge(self, stream_ids: Sequence[str]) -> int:
        """Remove whole streams on purpose; returns the events removed."""

    async def purge_objects(self, ids: Sequence[str]) -> int:
        """Remove objects whole (each id's stream and its internal streams) in one
        transaction; returns the events removed."""


class CacheIndex(Protocol):
    """The chat replay cache's index, kept by the backend in the transaction of each append
    that changes it: a completion's usage chunk adds its request key (a stored, deterministic
    request, not a copy), a tombstone or a purge removes it. Bounded by entries and age."""

    async def lookup(self, key: str) -> str | None:
        """The completion that answers this request key, if one is indexed and fresh (the
        newest, where a key was answered more than once)."""

    async def size(self) -> int: ...

    async def rebuild(self) -> int:
        """Make the index again from the whole log, within its bounds; returns its entries."""


class Leases(Protocol):
    """Who works on which stream, where several servers share one log: a lease (owner,
    expiry in the backend's clock) per stream, taken before its work starts and renewed while
    it runs. Not log rows: a lease says nothing a client reads, and goes when its work ends."""

    async def claim(self, stream_ids: Sequence[str], owner: str, ttl_ms: int) -> list[str]:
        """Take each stream's lease for `owner` for `ttl_ms` where nobody holds it, its lease
        has expired or `owner` holds it already, each in one atomic step; returns those taken
        (of two owners claiming at once, one gets it)."""

    async def renew(self, owner: str, ttl_ms: int) -> int:
        """Extend every lease `owner` holds by `ttl_ms` from now; returns how many."""

    async def release(self, stream_ids: Sequence[str], owner: str) -> None:
        """Give up `owner`'s leases of these streams (another's are left alone)."""

    async def expired(self) -> list[str]:
        """Streams whose lease has expired (their owner stopped renewing), oldest first."""

    async def holder(self, stream_id: str) -> tuple[str, int] | None:
        """(owner, expiry) of the stream's lease, if it has one."""

    async def settle(self) -> None:
        """Return once every append other servers began before this call has committed or
        failed: after a claim of another owner's expired streams, their last appends are in
        the log (or never will be) before the new owner reads them."""


class Store(EventLog, Protocol):
    """An event log with its replay-cache index and its leases: what the services are given."""

    @property
    def cache(self) -> CacheIndex: ...

    @property
    def leases(self) -> Leases: ...
