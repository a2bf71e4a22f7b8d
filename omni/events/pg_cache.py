"""The replay-cache index in PostgreSQL: the `chat_cache` table, which migration 0004's
plpgsql triggers keep in the transaction of each append that changes it (as SQLite's do).
The store bounds it in the same transaction; this answers lookups and rebuilds it. `rowid`
is the table's identity column there: it orders a key's rows as SQLite's rowid does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from omni.events.driver import Sql, now_ms
from omni.events.sqlite_cache import CACHE_UPKEEP_ROWS

if TYPE_CHECKING:
    from omni.events.postgres import PostgresStore

__all__ = ["CACHE_UPKEEP_ROWS", "INDEXED", "PostgresCacheIndex"]

# The events whose triggers add an index row: an append holding one bounds the index after
# (SQLite counts the rows its triggers changed; PostgreSQL's statement cannot tell). The
# rebuild below names the same type, as the schema's triggers do.
INDEXED = frozenset({"chat.completion.usage"})

_LOOKUP = (
    "SELECT completion_id FROM chat_cache WHERE key = %s AND created_at >= %s"
    " ORDER BY created_at DESC, rowid DESC LIMIT 1"
)
_REBUILD = """
    INSERT INTO chat_cache (key, completion_id, created_at)
    SELECT r.doc ->> 'key', u.stream_id, u.created_at FROM events u,
        (SELECT stream_id, type, omni_json(data) AS doc FROM events WHERE seq = 0) AS r
    WHERE u.type = 'chat.completion.usage' AND r.stream_id = u.stream_id || '/request'
      AND r.type = 'omni.request.accepted'
      AND r.doc ->> 'key' IS NOT NULL AND r.doc ->> 'mirror_of' IS NULL
      AND omni_int(r.doc #> '{body,store}') = 1
      AND NOT EXISTS (SELECT 1 FROM events d
                      WHERE d.stream_id = r.stream_id AND d.type = 'omni.completion.deleted')
    ORDER BY u.position
    ON CONFLICT DO NOTHING
"""
# LIMIT NULL: no limit (SQLite's LIMIT -1).
_EXPIRE = (
    "DELETE FROM chat_cache WHERE rowid IN (SELECT rowid FROM chat_cache"
    " WHERE created_at < %s ORDER BY created_at LIMIT %s)"
)
_TRIM = (
    "DELETE FROM chat_cache WHERE rowid IN (SELECT rowid FROM chat_cache"
    " ORDER BY created_at DESC, rowid DESC LIMIT %s OFFSET %s)"
)


class PostgresCacheIndex:
    """The index of one PostgresStore, within the store's bounds (cache_max_entries,
    cache_max_age_ms)."""

    def __init__(self, store: PostgresStore):
        self._store = store

    def upkeep(self, now: int, most: int | None) -> list[Sql]:
        """What bounds the index: at most `most` rows of each statement (None: all)."""
        store = self._store
        expire = (_EXPIRE, [(now - store.cache_max_age_ms, most)])
        if store.cache_max_entries < 0:  # no bound
            return [expire]
        return [expire, (_TRIM, [(most, store.cache_max_entries)])]

    async def lookup(self, key: str) -> str | None:
        """The completion that answers this request key, if one is indexed and fresh."""
        cutoff = now_ms() - self._store.cache_max_age_ms
        rows = await self._store.fetch_sql(_LOOKUP, (key, cutoff))
        return str(rows[0][0]) if rows else None

    async def size(self) -> int:
        return int((await self._store.fetch_sql("SELECT count(*) FROM chat_cache", ()))[0][0])

    async def rebuild(self) -> int:
        """Make the index again from the log, within its bounds; returns its entries."""
        statements: list[Sql] = [("DELETE FROM chat_cache", [()]), (_REBUILD, [()])]
        await self._store.write_sql([*statements, *self.upkeep(now_ms(), None)], "cache rebuild")
        return await self.size()
