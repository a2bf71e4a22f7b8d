"""The replay-cache index in PostgreSQL: the `chat_cache` table, which migration 0004's
plpgsql triggers keep in the transaction of each append that changes it (as SQLite's do).
The store bounds it in the same transaction; this answers lookups and rebuilds it
(omni/events/cache.py holds the statements SQLite shares)."""

from __future__ import annotations

from omni.events import cache
from omni.events.driver import Sql, now_ms
from omni.events.postgres.connections import PostgresConnections

# The events whose triggers add an index row: an append holding one bounds the index after
# (SQLite counts the rows its triggers changed; PostgreSQL's statement cannot tell): a chat
# completion's end (migration 0004) and a message's (0012). The rebuild below names the same
# types, as the schema's triggers do.
INDEXED = frozenset({"chat.completion.usage", "message_stop"})

_LOOKUP = cache.lookup("%s")
_REBUILD = """
    INSERT INTO chat_cache (key, completion_id, created_at)
    SELECT r.doc ->> 'key', u.stream_id, u.created_at FROM events u,
        (SELECT stream_id, type, omni_json(data) AS doc FROM events WHERE seq = 0) AS r
    WHERE u.type IN ('chat.completion.usage', 'message_stop')
      AND r.stream_id = u.stream_id || '/request'
      AND r.type = 'omni.request.accepted'
      AND r.doc ->> 'key' IS NOT NULL AND r.doc ->> 'mirror_of' IS NULL
      AND omni_int(r.doc #> '{body,store}') = 1
      AND NOT EXISTS (SELECT 1 FROM events d
                      WHERE d.stream_id = r.stream_id AND d.type = 'omni.completion.deleted')
    ORDER BY u.position
    ON CONFLICT DO NOTHING
"""


class PostgresCacheIndex:
    """The index of one PostgresStore, within the bounds its connections hold
    (cache_max_entries, cache_max_age_ms)."""

    def __init__(self, store: PostgresConnections):
        self._store = store

    def upkeep(self, now: int, most: int | None) -> list[Sql]:
        """What bounds the index: at most `most` rows of each statement (None: all; LIMIT
        NULL is no limit)."""
        return cache.upkeep("%s", self._store, now, most)

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
