"""The log's reads that SQLite and PostgreSQL word alike, in SQLAlchemy Core: each store runs
them on its own read connections (its `_fetch`), and adds what it words its own way."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select

from omni.events.contract import StoredEvent
from omni.events.schema import events, items


class SqlReads(ABC):
    """The contract's reads of a stream, a type and the item index (omni/events/contract.py's
    EventLog), over `_fetch`: one query, its rows."""

    @abstractmethod
    async def _fetch(self, query: Any) -> list[Any]: ...

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events of one stream with seq > after, in seq order."""
        query = (
            select(events)
            .where(events.c.stream_id == stream_id, events.c.seq > after)
            .order_by(events.c.seq)
        )
        if limit is not None:
            query = query.limit(limit)
        return [StoredEvent(*row) for row in await self._fetch(query)]

    async def last(self, stream_id: str) -> StoredEvent | None:
        """The newest event of a stream, or None for an empty stream."""
        query = (
            select(events).where(events.c.stream_id == stream_id).order_by(events.c.seq.desc())
        ).limit(1)
        rows = await self._fetch(query)
        return StoredEvent(*rows[0]) if rows else None

    async def next_seq(self, stream_id: str) -> int:
        query = select(func.coalesce(func.max(events.c.seq), -1)).where(
            events.c.stream_id == stream_id
        )
        return int((await self._fetch(query))[0][0]) + 1

    async def item_holders(self, item_id: str) -> list[str]:
        """The objects whose events hold an item with this id, the first to hold it first
        (the index the triggers of migration 0003 keep)."""
        query = (
            select(items.c.response_id).where(items.c.item_id == item_id).order_by(items.c.position)
        )
        return [row[0] for row in await self._fetch(query)]

    async def by_type(self, type_: str, after_position: int = 0) -> list[StoredEvent]:
        """Every event of one type, in log order (used by recovery and listings)."""
        query = (
            select(events)
            .where(events.c.type == type_, events.c.position > after_position)
            .order_by(events.c.position)
        )
        return [StoredEvent(*row) for row in await self._fetch(query)]

    async def unfinished(self, first_type: str, end_types: Sequence[str]) -> list[str]:
        """Streams that began with `first_type` and hold none of `end_types` (recovery)."""
        ended = select(events.c.stream_id).where(events.c.type.in_(list(end_types)))
        query = (
            select(events.c.stream_id)
            .where(events.c.type == first_type, events.c.seq == 0)
            .where(events.c.stream_id.not_in(ended))
            .order_by(events.c.position)
        )
        return [row[0] for row in await self._fetch(query)]
