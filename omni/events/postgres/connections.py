"""The PostgreSQL log's connections: one writer connection per store, on which every write
transaction holds the log's lock, and a pool of readers. omni/events/postgres/store.py builds
the log on them.

Positions grow in commit order: every append takes one transaction-scoped advisory lock
(LOG_LOCK) before its rows take their positions, and holds it through its commit, so a
position is handed out only once every smaller one is committed or rolled back, and a reader
following by `position > last_seen` never skips a row committed late (a sequence alone
hands out values at insert, not at commit). Purges take the lock too: no deadlock with an
append's triggers. A write goes in psycopg's pipeline mode: lock, statements and commit in
one round trip.

Reads go through SQLAlchemy's async engine (psycopg 3), in autocommit: one statement each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from omni.errors import SeqConflict, StoreError
from omni.events.driver import Sql, reason
from omni.location import conninfo, postgres_url, require_driver

T = TypeVar("T")

LOG_LOCK = 0x6F6D6E69_0000  # "omni", 0: held by each append (and purge) through its commit
_LOCK = f"SELECT pg_advisory_xact_lock({LOG_LOCK})"
SEQ_CONSTRAINT = "uq_events_stream_seq"


class PostgresConnections:
    """One database's connections, writes one at a time under LOG_LOCK; with the replay
    cache's bounds, which each write's upkeep keeps (omni/events/postgres/cache.py).
    `synchronous`: SQLite's names for PostgreSQL's synchronous_commit (FULL: on)."""

    def __init__(
        self, url: str, synchronous: str, max_entries: int, max_age_s: float, pool_size: int
    ):
        self.url = url
        # As SQLite's modes: FULL waits for each commit's WAL flush; NORMAL does not, so a
        # commit survives Omni's crash, and PostgreSQL's own only within ~0.6 s of it.
        self._synchronous_commit = "on" if synchronous.upper() in ("FULL", "EXTRA") else "off"
        self.cache_max_entries = max_entries
        self.cache_max_age_ms = int(max_age_s * 1000)
        self._pool_size = pool_size
        self._engine: AsyncEngine | None = None
        self._writer: Any = None  # psycopg.AsyncConnection: appends, purges, upkeep
        self._writing = asyncio.Lock()  # one write transaction at a time on it

    def _connect(self) -> None:
        """The readers' pool (the writer connects at its first write)."""
        require_driver()
        self._engine = create_async_engine(
            postgres_url(self.url),
            pool_size=self._pool_size,
            max_overflow=3 * self._pool_size,
            isolation_level="AUTOCOMMIT",  # a read is one statement: no BEGIN, no ROLLBACK
        )

    def check_file(self) -> None:
        """Nothing to check: no file (a database gone makes the next use a StoreError)."""

    def _writer_pid(self) -> int | None:
        writer = self._writer
        return None if writer is None or writer.closed else int(writer.info.backend_pid)

    async def close(self) -> None:
        async with self._writing:  # a write under way commits first
            writer, self._writer = self._writer, None
            if writer is not None:
                await writer.close()
        engine, self._engine = self._engine, None
        if engine is not None:
            await engine.dispose()

    # --- writes: one transaction at a time on the writer's connection, under LOG_LOCK -----

    async def _connection(self) -> Any:
        if self._engine is None:
            raise StoreError("the event store is not open")
        if self._writer is None or self._writer.closed:
            psycopg = require_driver()
            writer = await psycopg.AsyncConnection.connect(conninfo(self.url), autocommit=True)
            await writer.execute(f"SET synchronous_commit = {self._synchronous_commit}")
            await writer.set_autocommit(False)
            self._writer = writer
        return self._writer

    async def _write(self, work: Callable[[Any], Awaitable[T]], what: str) -> T:
        """Run `work(conn)` in one transaction holding LOG_LOCK. Once begun it runs whole,
        even if the caller is cancelled meanwhile (the caller only stops waiting)."""
        task = asyncio.ensure_future(self._locked(work, what))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(task)

    async def _locked(self, work: Callable[[Any], Awaitable[T]], what: str) -> T:
        psycopg = require_driver()
        async with self._writing:
            conn = await self._connection_or_error(what)
            try:
                async with conn.pipeline(), conn.transaction():
                    await conn.execute(_LOCK)
                    return await work(conn)
            except psycopg.errors.UniqueViolation as exc:
                if exc.diag.constraint_name == SEQ_CONSTRAINT:
                    raise SeqConflict(f"append conflict: {exc}") from exc
                raise StoreError(f"{what} refused: {exc}") from exc
            except psycopg.errors.IntegrityError as exc:
                raise StoreError(f"{what} refused: {exc}") from exc
            except Exception as exc:  # the driver's, or what it cannot send (a lone surrogate)
                if conn.broken:  # the next write connects again
                    self._writer = None
                raise StoreError(f"{what} failed: {exc}") from exc

    async def _connection_or_error(self, what: str) -> Any:
        try:
            return await self._connection()
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"{what} failed: cannot connect: {exc}") from exc

    async def write_sql(self, statements: Sequence[Sql], what: str) -> None:
        """`statements` (each with its rows of parameters) in one write transaction."""

        async def run(conn: Any) -> None:
            for sql, rows in statements:
                for params in rows:
                    await conn.execute(sql, params)

        await self._write(run, what)

    async def run_read(self, query: Callable[[Connection], T]) -> T:
        """Run a sync function over one read connection, in one snapshot (the inspector's
        queries, written once for the CLI's sync engine and this async one)."""
        engine = self._open_engine()
        try:
            async with engine.connect() as conn:
                snapshot = await conn.execution_options(isolation_level="REPEATABLE READ")
                async with snapshot.begin():
                    return await snapshot.run_sync(query)
        except SQLAlchemyError as exc:
            raise StoreError(f"read failed: {reason(exc)}") from exc

    async def fetch_sql(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        engine = self._open_engine()
        try:
            async with engine.connect() as conn:
                return list((await conn.exec_driver_sql(sql, params)).all())
        except SQLAlchemyError as exc:
            raise StoreError(f"read failed: {reason(exc)}") from exc

    async def _fetch(self, query: Any) -> list[Any]:
        engine = self._open_engine()
        try:
            async with engine.connect() as conn:
                return list((await conn.execute(query)).all())
        except SQLAlchemyError as exc:
            raise StoreError(f"read failed: {reason(exc)}") from exc

    def _open_engine(self) -> AsyncEngine:
        if self._engine is None:
            raise StoreError("the event store is not open")
        return self._engine
