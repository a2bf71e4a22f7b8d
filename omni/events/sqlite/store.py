"""The SQLite event store: `BEGIN IMMEDIATE` appends on the connections of
omni/events/sqlite/connections.py (a writer's thread, the event loop's own, many readers).

Appends, the log's hot path, commit at once on the event loop (its own connection) when
that keeps it short: nothing is queued for the writer's thread (so commit order stays call
order), a thousand rows at most, no wait for the disk (synchronous OFF or NORMAL: WAL writes
go to the OS), none for another process's write lock (the loop's connection never waits: busy,
the append goes to the writer's thread, which does), and checkpoints (file I/O) run on the
writer's thread. A commit of a few rows there takes ~30 µs; handed to the thread, its wake-up
alone took ~1 ms while the engine computed the next token (bench/ttft.py, in git history).

Driver errors are translated into `StoreError`; a duplicate (stream_id, seq) is a `SeqConflict`.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, func, or_, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from omni.errors import SeqConflict, StoreError
from omni.events.cache import CACHE_UPKEEP_ROWS
from omni.events.contract import Append, StoredEvent
from omni.events.driver import Sql, execute, now_ms, reason
from omni.events.maintenance import streams_of
from omni.events.reads import SqlReads
from omni.events.schema import events
from omni.events.sqlite import maintenance
from omni.events.sqlite.cache import SqliteCacheIndex
from omni.events.sqlite.connections import SqliteConnections
from omni.events.sqlite.leases import SqliteLeases
from omni.events.sqlite.recent import RecentRows

log = logging.getLogger(__name__)

# The most rows an append may commit directly on the event loop (more: the writer's thread).
# On this project's CPU 64 rows (a step of 64 streams) hold the loop 0.9 ms, 1,024 rows 7-10 ms.
# A backlog bigger than that goes to the thread, whose SQLAlchemy insert costs more in all (and
# holds the interpreter lock most of that time) but lets the loop run in between: at 256 the
# event pipeline at 64 clients lost a fifth of its events/s (bench/pipeline.py).
DIRECT_ROWS = 1024
# A passive checkpoint on the writer's thread after this many direct commits (the loop's
# connection never checkpoints itself). 8 streams of small deltas: the WAL levels off at ~6 MB
# (256: ~15 MB; SQLite's own default, 1,000 pages, is ~4 MB).
CHECKPOINT_EVERY = 100
# The replay-cache index is kept by the database (migration 0004's triggers: a completion's
# last event adds its row, a tombstone or a purge removes it); the store only bounds it. An
# append that changed it trims it in its own transaction while the bound is at most this: the
# trim walks the index (on this project's CPU 0.14 ms at 1,024 entries, 0.2 ms at 10,000,
# 0.9 ms at 100,000); a bigger cache is trimmed on the writer's thread just after.
DIRECT_CACHE_ENTRIES = 100_000
_INSERT = "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES "
_RETURNING = " RETURNING position, stream_id, seq"


def _run(conn: sqlite3.Connection, statements: Sequence[Sql]) -> None:
    """`statements` in one transaction of their own, on a driver connection."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql, params in statements:
            conn.executemany(sql, params)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class _Busy(Exception):
    """Another connection holds SQLite's write lock: the direct append gives way."""


class EventStore(SqliteConnections, SqlReads):
    """The event log and its cache index (omni/events/contract.py's Store) in SQLite (WAL;
    writes one at a time, in call order, on the writer's thread or, for appends, directly on
    the event loop). What only SQLite has stays off the contract: check_file, pragmas,
    run_read (the inspector's queries), checkpoints and scrubs."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "NORMAL",
        cache_max_entries: int = 1024,
        cache_max_age_s: float = 86400.0,
        recent_rows: int = 1024,
    ):
        super().__init__(path, synchronous, cache_max_entries, cache_max_age_s)
        self.cache = SqliteCacheIndex(self)  # in the same file, bounded in each append
        self.leases = SqliteLeases(self)
        # This store is the log's only writer, so what it committed last is what followers
        # want next; 0 turns the memory off (e.g. when something else writes the file too).
        self._recent = RecentRows(per_stream=recent_rows)
        self._direct_commits = 0

    async def open(self) -> None:
        upkeep = self.cache.upkeep(now_ms(), -1)

        def start(conn: Connection) -> None:
            """The replay cache within its age and bound (lowered since the last start, or
            expired meanwhile), all at once here rather than on the loop's appends."""
            tables = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")
            if "chat_cache" in {name for (name,) in tables}:  # a migrated log
                execute(conn, upkeep)

        await self._connect(start)

    async def append(self, appends: Iterable[Append]) -> list[StoredEvent]:
        """Append to one or more streams in ONE transaction; all or nothing. What the events
        change in the replay-cache index changes in the same transaction (the database's
        triggers), so an entry never points at an unfinished or deleted stream."""
        self.check_file()
        appends = list(appends)
        now = now_ms()
        rows: list[dict[str, Any]] = [
            {
                "stream_id": a.stream_id,
                "seq": a.first_seq + i,
                "type": e.type,
                "data": e.data,
                "created_at": now,
            }
            for a in appends
            for i, e in enumerate(a.events)
        ]
        if not rows:
            return []
        opened = [a.stream_id for a in appends if a.first_seq == 0 and not a.events]
        upkeep = self.cache.upkeep(now, CACHE_UPKEEP_ROWS)
        direct = self._direct
        if direct is not None and self._queued == 0 and len(rows) <= DIRECT_ROWS:
            try:
                return self._append_direct(direct, rows, upkeep, opened)
            except _Busy:
                pass  # another process writes: wait for it on the writer's thread
        return await self._append_on_writer(rows, upkeep, opened)

    async def _append_on_writer(
        self, rows: list[dict[str, Any]], upkeep: Sequence[Sql], opened: Sequence[str]
    ) -> list[StoredEvent]:
        """Commit `rows` on the writer's thread, in their place among its writes."""

        def insert(conn: Connection) -> list[StoredEvent]:
            driver = conn.connection.driver_connection
            before = driver.total_changes  # type: ignore[union-attr]
            result = conn.execute(
                events.insert().returning(events.c.position, events.c.stream_id, events.c.seq),
                rows,
                execution_options={"preserve_rowcount": False},
            )
            positions = {(r.stream_id, r.seq): r.position for r in result}
            if driver.total_changes - before > len(rows):  # type: ignore[union-attr]
                execute(conn, upkeep)  # the triggers changed the index: keep it bounded
            return _stored(rows, positions)

        def remember(done: asyncio.Future[list[StoredEvent]]) -> None:
            if not done.cancelled() and done.exception() is None:
                self._recent.add(done.result(), opened)

        try:
            # Remembered once committed, even if this caller was cancelled meanwhile (the next
            # seq a stream's writer asks for must be right).
            return await self._write(insert, then=remember)
        except IntegrityError as exc:
            raise _refused(exc.orig) from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"append failed: {reason(exc)}") from exc
        except StoreError:
            raise
        except Exception as exc:  # what the driver raises unwrapped (a string it cannot encode)
            raise StoreError(f"append failed: {exc}") from exc

    def _append_direct(
        self,
        conn: sqlite3.Connection,
        rows: list[dict[str, Any]],
        upkeep: Sequence[Sql] = (),
        opened: Sequence[str] = (),
    ) -> list[StoredEvent]:
        """Commit `rows` at once on the loop's connection (no await: nothing can cut it), with
        the replay cache's `upkeep` if their triggers changed the index; _Busy if another
        connection holds the write lock (nothing was written). `opened`: streams opened empty
        by the same append."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise _Busy from exc
            raise StoreError(f"append failed: {exc}") from exc
        indexed = False
        try:
            before = conn.total_changes  # counts what the triggers changed too
            sql = _INSERT + ",".join(["(?,?,?,?,?)"] * len(rows)) + _RETURNING
            values = [
                v
                for r in rows
                for v in (r["stream_id"], r["seq"], r["type"], r["data"], r["created_at"])
            ]
            positions = {(sid, seq): pos for pos, sid, seq in conn.execute(sql, values).fetchall()}
            indexed = conn.total_changes - before > len(rows)
            if indexed and self.cache_max_entries <= DIRECT_CACHE_ENTRIES:
                indexed = False
                for statement, params in upkeep:
                    conn.executemany(statement, params)
            stored = _stored(rows, positions)
            conn.execute("COMMIT")
        except BaseException as exc:  # whatever it is (a string SQLite cannot take too)
            self._roll_back(conn)
            if isinstance(exc, sqlite3.IntegrityError):
                raise _refused(exc) from exc
            if isinstance(exc, Exception):
                raise StoreError(f"append failed: {exc}") from exc
            raise
        self._recent.add(stored, opened)  # remembered before anything else can fail
        self._direct_commits += 1
        if indexed:  # a bound too big to trim on the loop
            self._hand_over(lambda raw: _run(raw, upkeep), "cache upkeep")
        if self._direct_commits % CHECKPOINT_EVERY == 0:
            self._checkpoint()
        return stored

    def _roll_back(self, conn: sqlite3.Connection) -> None:
        """End a failed direct transaction; a connection left inside one would hold SQLite's
        write lock for good: it is closed and appends go to the writer's thread from then on."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("rollback of a failed append failed")
        if conn.in_transaction:
            log.error("closing the event loop's connection: its transaction would not end")
            self._direct = None
            conn.close()

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events of one stream with seq > after, in seq order."""
        if self._file is not None:
            self._file.raise_if_lost()  # memory answers only for a file still ours
        recent = self._recent.after(stream_id, after, limit)
        if recent is not None:
            return recent  # just committed by this store: no need to ask SQLite again
        return await super().read(stream_id, after, limit)

    async def last(self, stream_id: str) -> StoredEvent | None:
        """The newest event of a stream, or None for an empty stream."""
        if self._file is not None:
            self._file.raise_if_lost()
        if (recent := self._recent.last(stream_id)) is not None:
            return recent
        return await super().last(stream_id)

    async def streams_with(self, type_: str, facts: Sequence[tuple[str, object]]) -> list[str]:
        """Streams with an event of `type_` whose JSON data holds one of `facts` (a JSON path
        and its value; true and false read as 1 and 0), in log order."""
        if not facts:
            return []
        held = or_(*(func.json_extract(events.c.data, path) == value for path, value in facts))
        query = (
            select(events.c.stream_id)
            .where(events.c.type == type_, held)
            .order_by(events.c.position)
        )
        return [row[0] for row in await self._fetch(query)]

    async def purge(self, stream_ids: Sequence[str]) -> int:
        """Remove whole streams on purpose (store:false streams once nobody reads them)."""
        doomed = list(stream_ids)
        self._recent.forget(doomed)

        def delete(conn: Connection) -> int:
            result = conn.execute(events.delete().where(events.c.stream_id.in_(doomed)))
            return int(result.rowcount or 0)

        try:
            # Appends to these streams queued before the delete put their rows in memory when
            # they committed: forget them again once the delete has.
            removed = await self._write(delete, then=lambda _: self._recent.forget(doomed))
        except SQLAlchemyError as exc:
            raise StoreError(f"purge failed: {reason(exc)}") from exc
        self._scrub_soon()
        return removed

    async def purge_objects(self, ids: Sequence[str]) -> int:
        """Remove finished objects whole (their streams, and so their replay-cache rows) on
        purpose, in one transaction: retention. Returns the events removed."""
        doomed = streams_of(ids)
        self._recent.forget(doomed)

        def delete(conn: Connection) -> int:
            return maintenance.delete(conn.connection.driver_connection, ids)  # type: ignore[arg-type]

        try:
            removed = await self._write(delete, then=lambda _: self._recent.forget(doomed))
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StoreError(f"purge failed: {exc}") from exc
        self._scrub_soon()
        return removed


def _refused(driver_error: object) -> StoreError:
    """An append the table refused (either write path): a taken (stream_id, seq) is a
    SeqConflict, any other constraint a StoreError."""
    if "UNIQUE" in str(driver_error):
        return SeqConflict(f"append conflict: {driver_error}")
    return StoreError(f"append refused: {driver_error}")


def _stored(rows: list[dict[str, Any]], positions: dict[tuple[str, int], int]) -> list[StoredEvent]:
    return [
        StoredEvent(
            positions[(r["stream_id"], r["seq"])],
            r["stream_id"],
            r["seq"],
            r["type"],
            r["data"],
            r["created_at"],
        )
        for r in rows
    ]
