"""The event store: one writer connection, `BEGIN IMMEDIATE` appends, many readers.

Driver errors are translated into `StoreError`; a duplicate (stream_id, seq) is a `SeqConflict`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event as sa_event
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from omni.errors import SeqConflict, StoreError
from omni.events.recent import RecentRows
from omni.events.schema import chat_cache, events


@dataclass(frozen=True, slots=True)
class NewEvent:
    type: str
    data: str  # JSON text, exactly the bytes a client will see


@dataclass(frozen=True, slots=True)
class Append:
    """Events for one stream; `first_seq` is the seq the first of them must get."""

    stream_id: str
    first_seq: int
    events: Sequence[NewEvent]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A replay-cache index row: this request key is answered by that finished completion."""

    key: str
    completion_id: str
    created_at: int | None = None  # unix ms it finished; None: now


@dataclass(frozen=True, slots=True)
class StoredEvent:
    position: int
    stream_id: str
    seq: int
    type: str
    data: str
    created_at: int


def _now_ms() -> int:
    return int(time.time() * 1000)


def _reason(exc: SQLAlchemyError) -> object:
    """The driver's own message where there is one (it names the real cause)."""
    return getattr(exc, "orig", None) or exc


def sqlite_url(path: str) -> str:
    return f"sqlite+aiosqlite:///{path}"


class EventStore:
    """Append and read streams of events in SQLite (WAL, one writer)."""

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
        # This store is the log's only writer, so what it committed last is what followers
        # want next; 0 turns the memory off (e.g. when something else writes the file too).
        self._recent = RecentRows(per_stream=recent_rows)
        self._writer: AsyncEngine | None = None
        self._reader: AsyncEngine | None = None

    async def open(self) -> None:
        # One connection for all writes: SQLite has one writer anyway, and a pool of one
        # makes insert order equal commit order.
        self._writer = self._engine(pool_size=1, begin="BEGIN IMMEDIATE")
        self._reader = self._engine(pool_size=4, begin="BEGIN")
        try:
            async with self._writer.connect() as conn:
                await conn.exec_driver_sql("SELECT 1")
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open database {self.path}: {_reason(exc)}") from exc

    def _engine(self, pool_size: int, begin: str) -> AsyncEngine:
        engine = create_async_engine(
            sqlite_url(self.path),
            poolclass=AsyncAdaptedQueuePool,
            pool_size=pool_size,
            max_overflow=0,
        )
        synchronous = self._synchronous

        @sa_event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transactions out of the driver's hands so BEGIN IMMEDIATE is ours.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()

        @sa_event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            # Writers take the lock up front (no upgrade deadlocks); readers stay deferred.
            conn.exec_driver_sql(begin)

        return engine

    async def pragmas(self) -> dict[str, object]:
        """The write connection's durability settings, for operators and tests."""
        writer = self._open(self._writer)
        async with writer.connect() as conn:
            journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            synchronous = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
        names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        return {"journal_mode": journal, "synchronous": names.get(int(synchronous or 0))}

    @staticmethod
    def _open(engine: AsyncEngine | None) -> AsyncEngine:
        if engine is None:
            raise StoreError("the event store is not open")
        return engine

    async def close(self) -> None:
        for engine in (self._writer, self._reader):
            if engine is not None:
                await engine.dispose()
        self._writer = self._reader = None

    async def append(
        self, appends: Iterable[Append], cache: Sequence[CacheEntry] = ()
    ) -> list[StoredEvent]:
        """Append to one or more streams in ONE transaction; all or nothing. Replay-cache
        index rows go in the same transaction, so an entry never points at an unfinished
        stream."""
        now = _now_ms()
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
        writer = self._open(self._writer)
        try:
            async with writer.begin() as conn:
                result = await conn.execute(
                    events.insert().returning(events.c.position, events.c.stream_id, events.c.seq),
                    rows,
                    execution_options={"preserve_rowcount": False},
                )
                positions = {(r.stream_id, r.seq): r.position for r in result}
                if cache:
                    await self._index(conn, cache, now)
        except IntegrityError as exc:
            if "UNIQUE" in str(exc.orig):
                raise SeqConflict(f"append conflict: {exc.orig}") from exc
            raise StoreError(f"append refused: {exc.orig}") from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"append failed: {_reason(exc)}") from exc
        stored = [
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
        self._recent.add(stored)
        return stored

    async def _index(self, conn: Any, cache: Sequence[CacheEntry], now: int) -> None:
        rows = [
            {"key": c.key, "completion_id": c.completion_id, "created_at": c.created_at or now}
            for c in cache
        ]
        await conn.execute(chat_cache.insert().prefix_with("OR REPLACE"), rows)
        cutoff = now - self.cache_max_age_ms
        await conn.execute(chat_cache.delete().where(chat_cache.c.created_at < cutoff))
        newest = (
            select(chat_cache.c.key)
            .order_by(chat_cache.c.created_at.desc())
            .limit(self.cache_max_entries)
        )
        await conn.execute(chat_cache.delete().where(chat_cache.c.key.not_in(newest)))

    async def cache_lookup(self, key: str) -> str | None:
        """The completion that answers this request key, if one is indexed and fresh."""
        cutoff = _now_ms() - self.cache_max_age_ms
        query = select(chat_cache.c.completion_id).where(
            chat_cache.c.key == key, chat_cache.c.created_at >= cutoff
        )
        rows = await self._fetch(query)
        return str(rows[0][0]) if rows else None

    async def cache_forget(self, completion_id: str) -> None:
        writer = self._open(self._writer)
        try:
            async with writer.begin() as conn:
                await conn.execute(
                    chat_cache.delete().where(chat_cache.c.completion_id == completion_id)
                )
        except SQLAlchemyError as exc:
            raise StoreError(f"cache update failed: {_reason(exc)}") from exc

    async def cache_size(self) -> int:
        return int((await self._fetch(select(func.count()).select_from(chat_cache)))[0][0])

    async def cache_rebuild(self, cache: Sequence[CacheEntry]) -> None:
        """Replace the whole index (it is a projection: the log can always rebuild it)."""
        writer = self._open(self._writer)
        try:
            async with writer.begin() as conn:
                await conn.execute(chat_cache.delete())
                if cache:
                    await self._index(conn, cache, _now_ms())
        except SQLAlchemyError as exc:
            raise StoreError(f"cache rebuild failed: {_reason(exc)}") from exc

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events of one stream with seq > after, in seq order."""
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

    async def purge(self, stream_ids: Sequence[str]) -> int:
        """Remove whole streams on purpose (store:false streams once nobody reads them)."""
        self._recent.forget(stream_ids)
        writer = self._open(self._writer)
        try:
            async with writer.begin() as conn:
                result = await conn.execute(
                    events.delete().where(events.c.stream_id.in_(list(stream_ids)))
                )
                return int(result.rowcount or 0)
        except SQLAlchemyError as exc:
            raise StoreError(f"purge failed: {_reason(exc)}") from exc

    async def _fetch(self, query: Any) -> list[Any]:
        reader = self._open(self._reader)
        try:
            async with reader.connect() as conn:
                return list((await conn.execute(query)).all())
        except SQLAlchemyError as exc:
            raise StoreError(f"read failed: {_reason(exc)}") from exc
