"""The replay-cache index in SQLite: the `chat_cache` table, which migration 0004's triggers
keep in the transaction of each append that changes it (a completion's last event adds its
row, a tombstone or a purge removes it). The store only bounds it, in the same transaction;
this answers lookups and rebuilds it, through the store's connections
(omni/events/cache.py holds the statements PostgreSQL shares)."""

from __future__ import annotations

import logging
import sqlite3

from sqlalchemy import Connection, func, literal_column, select
from sqlalchemy.exc import SQLAlchemyError

from omni.errors import StoreError
from omni.events import cache
from omni.events.driver import Sql, execute, now_ms, reason
from omni.events.schema import chat_cache
from omni.events.sqlite.connections import SqliteConnections

log = logging.getLogger(__name__)

# A lookup by key (its index) on the loop's connection: ~10 µs, where the reader's thread and
# SQLAlchemy took ~1 ms of the loop's time a request, and a burst's lookups queued behind each
# other there before any of them reached the engine.
_LOOKUP = cache.lookup("?")
# The index made from the whole log: what the triggers chat_cache_on_end (migration 0004)
# and chat_cache_on_message_end (0012) add at each chat completion's or message's end, less
# what 0004's other triggers remove (a tombstone, a purge). The one place the store names
# event types: the schema's own triggers name them too (tests/events/test_cache_index.py
# holds a rebuild equal to their work).
_CACHE_REBUILD = """
    INSERT OR IGNORE INTO chat_cache (key, completion_id, created_at)
    SELECT json_extract(r.data, '$.key'), u.stream_id, u.created_at FROM events u, events r
    WHERE u.type IN ('chat.completion.usage', 'message_stop')
      AND r.stream_id = u.stream_id || '/request' AND r.seq = 0
      AND r.type = 'omni.request.accepted'
      AND json_extract(r.data, '$.key') IS NOT NULL
      AND json_extract(r.data, '$.mirror_of') IS NULL
      AND json_extract(r.data, '$.body.store') = 1
      AND NOT EXISTS (SELECT 1 FROM events d
                      WHERE d.stream_id = r.stream_id AND +d.type = 'omni.completion.deleted')
    ORDER BY u.position
"""


class SqliteCacheIndex:
    """The index of one EventStore, within the bounds its connections hold
    (cache_max_entries, cache_max_age_ms)."""

    def __init__(self, store: SqliteConnections):
        self._store = store

    def upkeep(self, now: int, most: int) -> list[Sql]:
        """What bounds the index: at most `most` rows of each statement (-1: all)."""
        return cache.upkeep("?", self._store, now, most)

    async def lookup(self, key: str) -> str | None:
        """The completion that answers this request key, if one is indexed and fresh."""
        store = self._store
        store.check_file()
        cutoff = now_ms() - store.cache_max_age_ms
        direct = store._direct
        if direct is not None and not direct.in_transaction:
            try:
                found = direct.execute(_LOOKUP, (key, cutoff)).fetchone()
            except sqlite3.Error as exc:  # busy, say: the reader's connection waits for it
                log.debug("direct cache lookup failed: %s", exc)
            else:
                return str(found[0]) if found else None
        query = (
            select(chat_cache.c.completion_id)
            .where(chat_cache.c.key == key, chat_cache.c.created_at >= cutoff)
            .order_by(chat_cache.c.created_at.desc(), literal_column("rowid").desc())
            .limit(1)
        )
        rows = await store._fetch(query)
        return str(rows[0][0]) if rows else None

    async def size(self) -> int:
        return int((await self._store._fetch(select(func.count()).select_from(chat_cache)))[0][0])

    async def rebuild(self) -> int:
        """Make the index again from the log, within its bounds; returns its entries."""
        upkeep = self.upkeep(now_ms(), -1)

        def rebuild(conn: Connection) -> None:
            conn.execute(chat_cache.delete())
            conn.exec_driver_sql(_CACHE_REBUILD)
            execute(conn, upkeep)

        try:
            await self._store._write(rebuild)
        except SQLAlchemyError as exc:
            raise StoreError(f"cache rebuild failed: {reason(exc)}") from exc
        return await self.size()
