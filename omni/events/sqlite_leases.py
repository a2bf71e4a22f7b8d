"""The leases (omni/events/contract.py's Leases) in SQLite, through the store's connections:
writes on its writer's thread, in their place among the other writes. One server writes an
SQLite log (its file lock says so), so these hold little there; they are what a shared
PostgreSQL log coordinates its servers with, and the same statements run on both."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.exc import SQLAlchemyError

from omni.errors import StoreError
from omni.events import leases as sql
from omni.events.driver import now_ms, reason

if TYPE_CHECKING:
    from omni.events.store import EventStore

T = TypeVar("T")


class SqliteLeases:
    def __init__(self, store: EventStore):
        self._store = store

    async def claim(self, stream_ids: Sequence[str], owner: str, ttl_ms: int) -> list[str]:
        if not stream_ids:
            return []
        statement = sql.claim(insert, stream_ids, owner, now_ms(), ttl_ms)

        def take(conn: Connection) -> list[str]:
            return [str(row[0]) for row in conn.execute(statement)]

        taken = set(await self._writing(take))
        return [s for s in stream_ids if s in taken]

    async def renew(self, owner: str, ttl_ms: int) -> int:
        statement = sql.renew(owner, now_ms(), ttl_ms)
        return await self._writing(lambda conn: int(conn.execute(statement).rowcount or 0))

    async def release(self, stream_ids: Sequence[str], owner: str) -> None:
        if stream_ids:
            statement = sql.release(stream_ids, owner)
            await self._writing(lambda conn: conn.execute(statement).rowcount)

    async def expired(self) -> list[str]:
        return [str(row[0]) for row in await self._store._fetch(sql.expired(now_ms()))]

    async def holder(self, stream_id: str) -> tuple[str, int] | None:
        rows = await self._store._fetch(sql.holder(stream_id))
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    async def _writing(self, work: Callable[[Connection], T]) -> T:
        try:
            return await self._store._write(work)
        except SQLAlchemyError as exc:
            raise StoreError(f"lease write failed: {reason(exc)}") from exc

    async def settle(self) -> None:
        """Nothing to wait for: one server writes an SQLite log."""
