"""The leases (omni/events/contract.py's Leases) in PostgreSQL: the statements of
omni/events/leases.py on the store's async engine, each one statement in autocommit, so each
is atomic by itself (a claim's upsert takes the row lock: of two replicas claiming at once,
the second sees the first's lease and takes nothing). Not under the log's advisory lock:
a lease is no log row, and its writes need not wait for the appends.

Expiry is in the replicas' own clocks (unix ms), as on SQLite: replicas sharing a database
keep their clocks in sync (NTP), far closer than a lease lasts."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import SQLAlchemyError

from omni.errors import StoreError
from omni.events.driver import reason
from omni.events.leases import SqlLeases
from omni.events.postgres.connections import PostgresConnections


class PostgresLeases(SqlLeases):
    def __init__(self, store: PostgresConnections):
        super().__init__(insert, lambda query: store._fetch(query))
        self._store = store

    async def settle(self) -> None:
        """Take the log's lock once (omni/events/postgres/connections.py: every append holds
        it through its commit): the appends under way, an old owner's last among them, are
        through."""

        async def nothing(conn: Any) -> None:
            return None

        await self._store._write(nothing, "settle")

    async def _run(self, statement: Any) -> tuple[list[Any], int]:
        """Run one statement (autocommit: it commits alone); its rows and its row count."""
        engine = self._store._open_engine()
        try:
            async with engine.connect() as conn:
                result = await conn.execute(statement)
                rows = list(result.all()) if result.returns_rows else []
                return rows, int(result.rowcount or 0)
        except SQLAlchemyError as exc:
            raise StoreError(f"lease write failed: {reason(exc)}") from exc
