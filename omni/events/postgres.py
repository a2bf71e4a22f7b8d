"""The PostgreSQL event store: the contract of omni/events/contract.py on a database that
several processes may share.

Positions grow in commit order: every append takes one transaction-scoped advisory lock
(LOG_LOCK) before its rows take their positions, and holds it through its commit, so a
position is handed out only once every smaller one is committed or rolled back, and a reader
following by `position > last_seen` never skips a row committed late (a sequence alone
hands out values at insert, not at commit). Purges take the lock too: no deadlock with an
append's triggers. An append is one round trip: lock, insert, notify and commit go together
in psycopg's pipeline mode, on one writer connection per store.

Each append's `pg_notify` (omni/events/pg_listen.py) wakes followers in other processes.
There is no memory of recent rows here (SQLite's RecentRows): another process may append to
a stream (a cancel, say), and rows this store did not commit would be missing from it, so
every read asks the database (correctness first; a read is one pooled round trip).

A replica (`replica` set) appends only to streams no other replica leases: its lease may have
expired while it still ran the work (a stalled process, a slow database), and another replica
taken the stream over; its appends are refused from then on (LeaseLost), in the insert itself,
so a stream never has two writers.

Reads go through SQLAlchemy's async engine (psycopg 3), in autocommit: one statement each.
Driver errors become StoreError; a duplicate (stream_id, seq) is a SeqConflict.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from omni.errors import LeaseLost, SeqConflict, StoreError
from omni.events import maintenance
from omni.events.contract import Append, StoredEvent
from omni.events.driver import Sql, now_ms, reason
from omni.events.notifier import Notifier
from omni.events.pg_cache import CACHE_UPKEEP_ROWS, INDEXED, PostgresCacheIndex
from omni.events.pg_leases import PostgresLeases
from omni.events.pg_listen import CHANNEL, Listener
from omni.events.schema import events, items
from omni.location import conninfo, postgres_url, require_driver, shown

T = TypeVar("T")
log = logging.getLogger(__name__)

LOG_LOCK = 0x6F6D6E69_0000  # "omni", 0: held by each append (and purge) through its commit
_LOCK = f"SELECT pg_advisory_xact_lock({LOG_LOCK})"
_INSERT = (
    "INSERT INTO events (stream_id, seq, type, data, created_at)"
    " SELECT s, q, t, d, %s::bigint FROM unnest(%s::text[], %s::int[], %s::text[], %s::text[])"
    " AS u(s, q, t, d) RETURNING position, stream_id, seq"
)
# A replica's append: nothing at all if a stream of it is leased to another replica.
_FENCED_INSERT = _INSERT.replace(
    " RETURNING",
    " WHERE NOT EXISTS (SELECT 1 FROM leases WHERE stream_id = ANY(%s::text[]) AND owner <> %s)"
    " RETURNING",
)
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', s) FROM unnest(%s::text[]) AS s"
_DELETE = "DELETE FROM events WHERE stream_id = ANY(%s::text[])"
SEQ_CONSTRAINT = "uq_events_stream_seq"


class PostgresStore:
    """The event log and its cache index (the contract's Store) in PostgreSQL. `notifier`:
    the process's Notifier, woken for commits made elsewhere (None: none listened for);
    `synchronous`: SQLite's names for PostgreSQL's synchronous_commit (FULL: on)."""

    def __init__(
        self,
        url: str,
        *,
        cache_max_entries: int = 1024,
        cache_max_age_s: float = 86400.0,
        notifier: Notifier | None = None,
        synchronous: str = "NORMAL",
        pool_size: int = 8,
    ):
        self.url = url
        # As SQLite's modes: FULL waits for each commit's WAL flush; NORMAL does not, so a
        # commit survives Omni's crash, and PostgreSQL's own only within ~0.6 s of it.
        self._synchronous_commit = "on" if synchronous.upper() in ("FULL", "EXTRA") else "off"
        self.cache_max_entries = cache_max_entries
        self.cache_max_age_ms = int(cache_max_age_s * 1000)
        self.cache = PostgresCacheIndex(self)  # in the same database, bounded in each append
        self.leases = PostgresLeases(self)  # who runs what, among replicas sharing the log
        self.replica: str | None = None  # the server's: its appends are fenced by the leases
        self._notifier = notifier
        self._pool_size = pool_size
        self._engine: AsyncEngine | None = None
        self._writer: Any = None  # psycopg.AsyncConnection: appends, purges, upkeep
        self._writing = asyncio.Lock()  # one write transaction at a time on it
        self._listener: Listener | None = None

    async def open(self) -> None:
        require_driver()
        self._engine = create_async_engine(
            postgres_url(self.url),
            pool_size=self._pool_size,
            max_overflow=3 * self._pool_size,
            isolation_level="AUTOCOMMIT",  # a read is one statement: no BEGIN, no ROLLBACK
        )
        try:
            # The replay cache within its age and bound (lowered since the last start, or
            # expired meanwhile), all at once here rather than in the appends.
            await self.write_sql(self.cache.upkeep(now_ms(), None), "open")
            if self._notifier is not None:
                self._listener = Listener(conninfo(self.url), self._notifier, self._writer_pid)
                await self._listener.start()
        except BaseException as exc:
            await asyncio.shield(self.close())
            if isinstance(exc, StoreError):
                raise
            if isinstance(exc, Exception):
                raise StoreError(f"cannot open database {shown(self.url)}: {exc}") from exc
            raise

    def check_file(self) -> None:
        """Nothing to check: no file (a database gone makes the next use a StoreError)."""

    def _writer_pid(self) -> int | None:
        writer = self._writer
        return None if writer is None or writer.closed else int(writer.info.backend_pid)

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
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

    async def append(self, appends: Iterable[Append]) -> list[StoredEvent]:
        """Append to one or more streams in ONE transaction; all or nothing. The replay-cache
        index changes in the same transaction (the triggers), and is bounded there."""
        appends = list(appends)
        now = now_ms()
        rows = [
            (a.stream_id, a.first_seq + i, e.type, e.data)
            for a in appends
            for i, e in enumerate(a.events)
        ]
        if not rows:
            return []
        columns = [list(c) for c in zip(*rows, strict=True)]
        streams = list(dict.fromkeys(columns[0]))
        indexed = not INDEXED.isdisjoint(columns[2])
        upkeep = self.cache.upkeep(now, CACHE_UPKEEP_ROWS) if indexed else []

        async def insert(conn: Any) -> Any:
            cursor = conn.cursor()
            if self.replica is None:
                await cursor.execute(_INSERT, (now, *columns))
            else:
                await cursor.execute(_FENCED_INSERT, (now, *columns, streams, self.replica))
            await conn.execute(_NOTIFY, (streams,))  # delivered at the commit, to listeners
            for sql, params in upkeep:
                for p in params:
                    await conn.execute(sql, p)
            return cursor  # read once the pipeline is through (one round trip in all)

        cursor = await self._write(insert, "append")
        positions = {(sid, seq): pos for pos, sid, seq in await cursor.fetchall()}
        if len(positions) < len(rows):  # fenced: nothing was inserted
            raise LeaseLost(f"append to {', '.join(streams)} refused: leased to another server")
        return [
            StoredEvent(positions[(sid, seq)], sid, seq, type_, data, now)
            for sid, seq, type_, data in rows
        ]

    async def _delete(self, stream_ids: list[str]) -> int:
        async def delete(conn: Any) -> Any:
            cursor = conn.cursor()
            await cursor.execute(_DELETE, (stream_ids,))
            return cursor

        return int((await self._write(delete, "purge")).rowcount) if stream_ids else 0

    async def purge(self, stream_ids: Sequence[str]) -> int:
        """Remove whole streams on purpose (store:false streams once nobody reads them)."""
        return await self._delete(list(stream_ids))

    async def purge_objects(self, ids: Sequence[str]) -> int:
        """Remove finished objects whole (their streams, and so their index rows) in one
        transaction: retention. Returns the events removed."""
        return await self._delete(maintenance.streams_of(ids))

    # --- reads: the async engine's pool ---------------------------------------------------

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        query = (
            select(events)
            .where(events.c.stream_id == stream_id, events.c.seq > after)
            .order_by(events.c.seq)
        )
        if limit is not None:
            query = query.limit(limit)
        return [StoredEvent(*row) for row in await self._fetch(query)]

    async def last(self, stream_id: str) -> StoredEvent | None:
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
        query = (
            select(items.c.response_id).where(items.c.item_id == item_id).order_by(items.c.position)
        )
        return [row[0] for row in await self._fetch(query)]

    async def by_type(self, type_: str, after_position: int = 0) -> list[StoredEvent]:
        query = (
            select(events)
            .where(events.c.type == type_, events.c.position > after_position)
            .order_by(events.c.position)
        )
        return [StoredEvent(*row) for row in await self._fetch(query)]

    async def unfinished(self, first_type: str, end_types: Sequence[str]) -> list[str]:
        ended = select(events.c.stream_id).where(events.c.type.in_(list(end_types)))
        query = (
            select(events.c.stream_id)
            .where(events.c.type == first_type, events.c.seq == 0)
            .where(events.c.stream_id.not_in(ended))
            .order_by(events.c.position)
        )
        return [row[0] for row in await self._fetch(query)]

    async def streams_with(self, type_: str, facts: Sequence[tuple[str, object]]) -> list[str]:
        """As SQLite's json_extract reads them: true and false as 1 and 0, a string as text."""
        if not facts:
            return []
        held, params = [], []
        for path, value in facts:
            if isinstance(value, bool | int):
                held.append("omni_int(e.doc #> %s::text[]) = %s")
                params += [json_path(path), int(value)]
            else:
                held.append("e.doc #>> %s::text[] = %s")
                params += [json_path(path), str(value)]
        sql = (
            "SELECT e.stream_id FROM (SELECT stream_id, position, omni_json(data) AS doc"
            f" FROM events WHERE type = %s) AS e WHERE {' OR '.join(held)} ORDER BY e.position"
        )
        return [row[0] for row in await self.fetch_sql(sql, (type_, *params))]

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


def json_path(path: str) -> list[str]:
    """'$.choices[0].text' → ['choices', '0', 'text'] (a jsonb path's keys)."""
    return [name or index for name, index in re.findall(r"\.(\w+)|\[(\d+)\]", path[1:])]
