"""The SQLite log's connections: a writer connection on its own thread, the event loop's own
connection for direct appends and cache lookups, a pool of readers; the checkpoints and
scrubs that keep the WAL small. omni/events/sqlite/store.py builds the log on them.

Every write transaction is one function run whole on the writer's thread: a commit costs the event
loop one hand-over, not one per driver call (through the async driver an append was nine), and a
transaction is never left half-done by a cancelled caller. Reads go through the async engine.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy import event as sa_event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, QueuePool

from omni.errors import StoreError
from omni.events.driver import reason
from omni.events.sqlite.identity import FileIdentity


def sqlite_url(path: str) -> str:
    return f"sqlite+aiosqlite:///{path}"


T = TypeVar("T")

log = logging.getLogger(__name__)

# After a purge the deleted bytes leave the file: every connection zeroes what it deletes
# (secure_delete), and a TRUNCATE checkpoint copies the zeroed pages into the database and
# empties the WAL, which still holds the pages as they were. One at most every SCRUB_EVERY_S
# (doubling, up to SCRUB_EVERY_MAX_S, while it cannot finish); each waits SCRUB_WAIT_MS at
# most for readers of an older snapshot (appends queue behind it meanwhile), then gives way.
SCRUB_EVERY_S = 1.0
SCRUB_EVERY_MAX_S = 32.0
SCRUB_WAIT_MS = 50


class SqliteConnections:
    """One SQLite file's connections, writes one at a time in call order; with the replay
    cache's bounds, which each write's upkeep keeps (omni/events/sqlite/cache.py)."""

    def __init__(self, path: str, synchronous: str, max_entries: int, max_age_s: float):
        self.path = path
        self._synchronous = synchronous
        self.cache_max_entries = max_entries
        self.cache_max_age_ms = int(max_age_s * 1000)
        self._writer: Engine | None = None
        self._write_thread: ThreadPoolExecutor | None = None
        self._reader: AsyncEngine | None = None
        self._direct: sqlite3.Connection | None = None  # the event loop's, for appends
        self._queued = 0  # writes handed to the writer's thread and not yet done
        self._file: FileIdentity | None = None  # the file opened, once open
        self._scrub_due: asyncio.TimerHandle | None = None
        self._scrub_every = SCRUB_EVERY_S
        self._scrubbed_at = -SCRUB_EVERY_MAX_S  # loop time of the last scrub's start
        self.scrubs = 0  # scrubs that emptied the WAL (tests wait on it)

    async def _connect(self, first: Callable[[Connection], object]) -> None:
        """Open the connections; `first` is the first write transaction (the store's start)."""
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
        try:
            await self._write(first)
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
        sqlite/identity.py); checked before every write and every read of SQLite."""
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
