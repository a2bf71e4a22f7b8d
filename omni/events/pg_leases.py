"""The leases (omni/events/contract.py's Leases) in PostgreSQL: the statements of
omni/events/leases.py on the store's async engine, each one statement in autocommit, so each
is atomic by itself (a claim's upsert takes the row lock: of two replicas claiming at once,
the second sees the first's lease and takes nothing). Not under the log's advisory lock:
a lease is no log row, and its writes need not wait for the appends.

Expiry is in the replicas' own clocks (unix ms), as on SQLite: replicas sharing a database
keep their clocks in sync (NTP), far closer than a lease lasts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import SQLAlchemyError

from omni.errors import StoreError
from omni.events import leases as sql
from omni.events.driver import now_ms, reason

if TYPE_CHECKING:
    from omni.events.postgres import PostgresStore


class PostgresLeases:
    def __init__(self, store: PostgresStore):
        self._store = store

    async def claim(self, stream_ids: Sequence[str], owner: str, ttl_ms: int) -> list[str]:
        if not stream_ids:
            return []
        # Rows locked in one order by every claimant: two claims of many never deadlock.
        ordered = sorted(set(stream_ids))
        rows, _ = await self._execute(sql.claim(insert, ordered, owner, now_ms(), ttl_ms))
        taken = {str(row[0]) for row in rows}
        return [s for s in stream_ids if s in taken]

    async def renew(self, owner: str, ttl_ms: int) -> int:
        _, count = await self._execute(sql.renew(owner, now_ms(), ttl_ms))
        return count

    async def release(self, stream_ids: Sequence[str], owner: str) -> None:
        if stream_ids:
            await self._execute(sql.release(sorted(set(stream_ids)), owner))

    async def expired(self) -> list[str]:
        return [str(row[0]) for row in await self._store._fetch(sql.expired(now_ms()))]

    async def holder(self, stream_id: str) -> tuple[str, int] | None:
        rows = await self._store._fetch(sql.holder(stream_id))
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    async def settle(self) -> None:
        """Take the log's lock once (omni/events/postgres.py: every append holds it through
        its commit): the appends under way, an old owner's last among them, are through."""

        async def nothing(conn: Any) -> None:
            return None

        await self._store._write(nothing, "settle")

    async def _execute(self, statement: Any) -> tuple[list[Any], int]:
        """Run one statement (autocommit: it commits alone); its rows and its row count."""
        engine = self._store._open_engine()
        try:
            async with engine.connect() as conn:
                result = await conn.execute(statement)
                rows = list(result.all()) if result.returns_rows else []
                return rows, int(result.rowcount or 0)
        except SQLAlchemyError as exc:
            raise StoreError(f"lease write failed: {reason(exc)}") from exc
