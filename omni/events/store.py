"""The SQLite event store: a writer connection on its own thread, `BEGIN IMMEDIATE` appends, many
readers.

Every write transaction is one function run whole on the writer's thread: a commit costs the event
loop one hand-over, not one per driver call (through the async driver an append was nine), and a
transaction is never left half-done by a cancelled caller. Reads go through the async engine.

Appends, the log's hot path, commit at once on the event loop instead (its own connection) when
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
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, func, or_, select
from sqlalchemy import event as sa_event
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, QueuePool

from omni.errors import SeqConflict, StoreError
from omni.events import maintenance
from omni.events.contract import Append, StoredEvent
from omni.events.driver import Sql, execute, now_ms, reason
from omni.events.identity import FileIdentity
from omni.events.recent import RecentRows
from omni.events.schema import events, items
from omni.events.sqlite_cache import CACHE_UPKEEP_ROWS, SqliteCacheIndex
from omni.events.sqlite_leases import SqliteLeases


def sqlite_url(path: str) -> str:
    return f"sqlite+aiosqlite:///{path}"


T = TypeVar("T")

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
# After a purge the deleted bytes leave the file: every connection zeroes what it deletes
# (secure_delete), and a TRUNCATE checkpoint copies the zeroed pages into the database and
# empties the WAL, which still holds the pages as they were. One at most every SCRUB_EVERY_S
# (doubling, up to SCRUB_EVERY_MAX_S, while it cannot finish); each waits SCRUB_WAIT_MS at
# most for readers of an older snapshot (appends queue behind it meanwhile), then gives way.
SCRUB_EVERY_S = 1.0
SCRUB_EVERY_MAX_S = 32.0
SCRUB_WAIT_MS = 50
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


class EventStore:
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
        self.path = path
        self._synchronous = synchronous
        self.cache_max_entries = cache_max_entries
        self.cache_max_age_ms = int(cache_max_age_s * 1000)
        self.cache = SqliteCacheIndex(self)  # in the same file, bounded in each append
        self.leases = SqliteLeases(self)
        # This store is the log's only writer, so what it committed last is what followers
        # want next; 0 turns the memory off (e.g. when something else writes the file too).
        self._recent = RecentRows(per_stream=recent_rows)
        self._writer: Engine | None = None
        self._write_thread: ThreadPoolExecutor | None = None
        self._reader: AsyncEngine | None = None
        self._direct: sqlite3.Connection | None = None  # the event loop's, for appends
        self._queued = 0  # writes handed to the writer's thread and not yet done
        self._direct_commits = 0
        self._file: FileIdentity | None = None  # the file opened, once open
        self._scrub_due: asyncio.TimerHandle | None = None
        self._scrub_every = SCRUB_EVERY_S
        self._scrubbed_at = -SCRUB_EVERY_MAX_S  # loop time of the last scrub's start
        self.scrubs = 0  # scrubs that emptied the WAL (tests wait on it)

    async def open(self) -> None:
        # One connection for the writes, used by one thread: SQLite has one writer anyway, and
        # one queue of write transactions makes insert order equal commit order (a direct
        # append on the loop's connection runs only when that queue is empty).
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="omni-writer")
        self._writer = self._configure(
            create_engine(
                f"sqlite:///{self.path}", poolclass=QueuePool, pool_size=1, max_overflow=0
            ),
            begin="BEGIN IMMEDIATE",
        )
        self._reader = self._configure(
            create_async_engine(
                sqlite_url(self.path),
                poolclass=AsyncAdaptedQueuePool,
                pool_size=4,
                max_overflow=0,
            ),
            begin="BEGIN",
        )
        upkeep = self.cache.upkeep(now_ms(), -1)

        def start(conn: Connection) -> None:
            """The replay cache within its age and bound (lowered since the last start, or
            expired meanwhile), all at once here rather than on the loop's appends."""
            tables = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")
            if "chat_cache" in {name for (name,) in tables}:  # a migrated log
                execute(conn, upkeep)

        try:
            await self._write(start)
        except BaseException as exc:  # cancelled too: no thread or engine is left behind
            await asyncio.shield(self.close())
            if isinstance(exc, SQLAlchemyError):
                raise StoreError(f"cannot open database {self.path}: {reason(exc)}") from exc
            raise
        if self._synchronous.upper() in ("OFF", "NORMAL", "0", "1"):
            self._direct = self._connect_direct()
        try:
            self._file = FileIdentity(self.path)
        except OSError as exc:
            await asyncio.shield(self.close())
            raise StoreError(f"cannot open database {self.path}: {exc.strerror}") from None

    def check_file(self) -> None:
        """StoreUnavailable once the file at the path is not the one opened (omni/events/
        identity.py); checked before every write and every read of SQLite."""
        if self._file is not None:
            self._file.check()

    def _connect_direct(self) -> sqlite3.Connection | None:
        """The event loop's own connection for direct appends (None: every append goes to
        the writer's thread)."""
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            log.warning("appends go through the writer's thread only: %s", exc)
            return None
        try:
            conn.execute("PRAGMA busy_timeout=0")  # never wait on the loop: the thread waits
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute("PRAGMA wal_autocheckpoint=0")  # the writer's thread checkpoints
            conn.execute("PRAGMA secure_delete=ON")  # its triggers delete index rows
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                raise sqlite3.OperationalError("the log is not in WAL mode")
        except sqlite3.Error as exc:
            conn.close()
            log.warning("appends go through the writer's thread only: %s", exc)
            return None
        return conn

    def _configure(self, engine: Any, begin: str) -> Any:
        synchronous = self._synchronous
        sync_engine = getattr(engine, "sync_engine", engine)

        @sa_event.listens_for(sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transactions out of the driver's hands so BEGIN IMMEDIATE is ours.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.execute("PRAGMA secure_delete=ON")  # what a purge deletes is zeroed, not left
            cur.close()

        @sa_event.listens_for(sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            # Writers take the lock up front (no upgrade deadlocks); readers stay deferred.
            conn.exec_driver_sql(begin)

        return engine

    async def _write(
        self,
        work: Callable[[Connection], T],
        then: Callable[[asyncio.Future[T]], object] | None = None,
    ) -> T:
        """Run `work` in one write transaction on the writer's thread (committed if it returns,
        rolled back if it raises); a transaction always runs whole there. Once submitted it
        runs, in its place in the queue, even if the caller is cancelled meanwhile (the caller
        only stops waiting); `then` runs on the event loop when it is done, either way."""
        self.check_file()
        writer = self._open(self._writer)
        thread = self._write_thread
        assert thread is not None

        def transaction() -> T:
            with writer.begin() as conn:
                return work(conn)

        done = asyncio.wrap_future(thread.submit(transaction))
        self._queued += 1  # direct appends wait for the queue to empty: order is kept
        done.add_done_callback(self._write_done)
        if then is not None:
            done.add_done_callback(then)
        return await asyncio.shield(done)

    def _write_done(self, done: asyncio.Future[Any]) -> None:
        self._queued -= 1
        if not done.cancelled():
            done.exception()  # always retrieved: the caller may have stopped waiting

    async def pragmas(self) -> dict[str, object]:
        """The write connection's durability settings, for operators and tests."""

        def read(conn: Connection) -> tuple[Any, ...]:
            return tuple(
                conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "secure_delete")
            )

        journal, synchronous, secure = await self._write(read)
        names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        return {
            "journal_mode": journal,
            "synchronous": names.get(int(synchronous or 0)),
            "secure_delete": bool(secure),
        }

    @staticmethod
    def _open(engine: T | None) -> T:
        if engine is None:
            raise StoreError("the event store is not open")
        return engine

    async def close(self) -> None:
        writer, thread, reader = self._writer, self._write_thread, self._reader
        self._writer = self._write_thread = self._reader = None
        direct, self._direct = self._direct, None
        if self._scrub_due is not None:  # the last connection's close checkpoints anyway
            self._scrub_due.cancel()
            self._scrub_due = None
        try:
            if direct is not None:
                direct.close()
            if thread is not None and writer is not None:
                # Queued writes finish first: the thread runs them in order, then the dispose.
                await asyncio.shield(asyncio.wrap_future(thread.submit(writer.dispose)))
        finally:
            if thread is not None:
                thread.shutdown(wait=False)
            if reader is not None:
                await asyncio.shield(reader.dispose())

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

    def _checkpoint(self) -> None:
        """A passive checkpoint on the writer's thread. SQLite starts the WAL over only when a
        write finds it wholly checkpointed; direct commits landing during a checkpoint kept
        that from happening, and the WAL grew without bound (150 MB in 30 s of 8 streams)."""
        self._hand_over(
            lambda raw: raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall(), "checkpoint"
        )

    def _hand_over(
        self,
        work: Callable[[sqlite3.Connection], object],
        what: str,
        then: Callable[[asyncio.Future[Any]], object] | None = None,
    ) -> None:
        """Run `work` on the writer's thread, on its own driver connection, outside any
        transaction of ours. It counts as a queued write: appends meanwhile go to the thread
        too, behind it. Not waited for; a failure is logged. `work` reads what it runs to
        the end: a statement left running on the writer's connection fails its next commit."""
        writer, thread = self._writer, self._write_thread
        if writer is None or thread is None:
            return

        def run() -> object:
            raw = writer.raw_connection()
            try:
                return work(raw.driver_connection)  # type: ignore[arg-type]
            finally:
                raw.close()

        def done(future: asyncio.Future[Any]) -> None:
            if not future.cancelled() and (exc := future.exception()) is not None:
                log.warning("%s failed: %s", what, exc)

        try:
            handed = asyncio.wrap_future(thread.submit(run))
        except RuntimeError as exc:  # the thread is shutting down: the close checkpoints
            log.warning("%s not handed over: %s", what, exc)
            return
        self._queued += 1
        handed.add_done_callback(self._write_done)
        handed.add_done_callback(done)
        if then is not None:
            handed.add_done_callback(then)

    def _scrub_soon(self) -> None:
        """Purged bytes out of the WAL too, soon (see SCRUB_EVERY_S): one scrub covers every
        purge before it."""
        if self._scrub_due is not None or self._writer is None:
            return
        loop = asyncio.get_running_loop()
        wait = max(0.0, self._scrubbed_at + self._scrub_every - loop.time())
        self._scrub_due = loop.call_later(wait, self._scrub)

    def _scrub(self) -> None:
        self._scrub_due = None
        self._scrubbed_at = asyncio.get_running_loop().time()

        def truncate(raw: sqlite3.Connection) -> bool:
            # Each read whole: a statement left running would make the next commit fail.
            raw.execute(f"PRAGMA busy_timeout={SCRUB_WAIT_MS}").fetchall()
            try:
                (busy, _, _), *_ = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                raw.execute("PRAGMA busy_timeout=5000").fetchall()
            return not busy

        def then(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and done.exception() is None and done.result():
                self.scrubs += 1
                self._scrub_every = SCRUB_EVERY_S
                return
            # A reader of an older snapshot (a backup, a long scan) kept the WAL: try again.
            log.debug("the WAL could not be emptied yet: another try soon")
            self._scrub_every = min(self._scrub_every * 2, SCRUB_EVERY_MAX_S)
            self._scrub_soon()

        self._hand_over(truncate, "scrub", then)

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events of one stream with seq > after, in seq order."""
        if self._file is not None:
            self._file.raise_if_lost()  # memory answers only for a file still ours
        recent = self._recent.after(stream_id, after, limit)
        if recent is not None:
            return recent  # just committed by this store: no need to ask SQLite again
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
        if self._file is not None:
            self._file.raise_if_lost()
        if (recent := self._recent.last(stream_id)) is not None:
            return recent
        query = (
            select(events).where(events.c.stream_id == stream_id).order_by(events.c.seq.desc())
        ).limit(1)
        rows = await self._fetch(query)
        return StoredEvent(*rows[0]) if rows else None

    async def next_seq(self, stream_id: str) -> int:
        query = select(func.coalesce(func.max(events.c.seq), -1)).where(
            events.c.stream_id == stream_id
        )
        rows = await self._fetch(query)
        return int(rows[0][0]) + 1

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
        doomed = maintenance.streams_of(ids)
        self._recent.forget(doomed)

        def delete(conn: Connection) -> int:
            return maintenance.delete(conn.connection.driver_connection, ids)  # type: ignore[arg-type]

        try:
            removed = await self._write(delete, then=lambda _: self._recent.forget(doomed))
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StoreError(f"purge failed: {exc}") from exc
        self._scrub_soon()
        return removed

    async def run_read(self, query: Callable[[Connection], T]) -> T:
        """Run a sync function over one read connection (the inspector's queries, written
        once for the CLI's sync engine and this async one)."""
        self.check_file()
        reader = self._open(self._reader)
        try:
            async with reader.connect() as conn:
                return await conn.run_sync(query)
        except SQLAlchemyError as exc:
            raise StoreError(f"read failed: {reason(exc)}") from exc

    async def _fetch(self, query: Any) -> list[Any]:
        self.check_file()  # before a pooled connection opens the file now at the path
        reader = self._open(self._reader)
        try:
            async with reader.connect() as conn:
                return list((await conn.execute(query)).all())
        except SQLAlchemyError as exc:
            raise StoreError(f"read failed: {reason(exc)}") from exc


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
