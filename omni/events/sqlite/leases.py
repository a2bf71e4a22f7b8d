"""The leases (omni/events/contract.py's Leases) in SQLite, through the store's connections:
writes on its writer's thread, in their place among the other writes. One server writes an
SQLite log (its file lock says so), so these hold little there; they are what a shared
PostgreSQL log coordinates its servers with, and the same statements (omni/events/leases.py)
run on both."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.exc import SQLAlchemyError

from omni.errors import StoreError
from omni.events.driver import reason
from omni.events.leases import SqlLeases
from omni.events.sqlite.connections import SqliteConnections


class SqliteLeases(SqlLeases):
    def __init__(self, store: SqliteConnections):
        super().__init__(insert, lambda query: store._fetch(query))
        self._store = store

    async def _run(self, statement: Any) -> tuple[list[Any], int]:
        def run(conn: Connection) -> tuple[list[Any], int]:
            result = conn.execute(statement)
            rows = list(result.all()) if result.returns_rows else []
            return rows, int(result.rowcount or 0)

        try:
            return await self._store._write(run)
        except SQLAlchemyError as exc:
            raise StoreError(f"lease write failed: {reason(exc)}") from exc

    async def settle(self) -> None:
        """Nothing to wait for: one server writes an SQLite log."""
