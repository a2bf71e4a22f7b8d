"""The replay-cache index's statements that SQLite and PostgreSQL share: the `chat_cache`
table, which migration 0004's triggers keep in the transaction of each append that changes
it (a completion's last event adds its row, a tombstone or a purge removes it). A store only
bounds it, in the same transaction, and answers lookups; each dialect words its rebuild
(omni/events/sqlite/cache.py, omni/events/postgres/cache.py). The statements take a
dialect's parameter mark: SQLite's `?`, psycopg's `%s`."""

from __future__ import annotations

from typing import Protocol

from omni.events.driver import Sql

# Replay-cache index upkeep, on either path, in the append's transaction: what is past its
# age, then all but the newest cache_max_entries. The trim walks the created_at index from the
# newest and deletes what lies past the limit: ~0.1 ms at 1,024 entries, where `key NOT IN
# (the newest 1,024)` took ~1 ms (a temporary b-tree each time). An append's upkeep deletes at
# most CACHE_UPKEEP_ROWS of each (the triggers add a row or two): a day's
# worth of entries expiring at once, or a bound lowered since the last start, must not be
# deleted in one go on the event loop (100,000 rows: ~100 ms). The rest goes with the next
# appends (lookups skip expired entries anyway); open() and rebuild() delete all at once,
# on the writer's thread.
CACHE_UPKEEP_ROWS = 64

# A key answered more than once (a no-cache request, a race) has a row for each: the newest
# answers, and the next one once that is deleted. (PostgreSQL's `rowid` is the table's
# identity column: it orders a key's rows as SQLite's rowid does.)
_LOOKUP = (
    "SELECT completion_id FROM chat_cache WHERE key = {p} AND created_at >= {p}"
    " ORDER BY created_at DESC, rowid DESC LIMIT 1"
)
_EXPIRE = (
    "DELETE FROM chat_cache WHERE rowid IN (SELECT rowid FROM chat_cache"
    " WHERE created_at < {p} ORDER BY created_at LIMIT {p})"
)
_TRIM = (
    "DELETE FROM chat_cache WHERE rowid IN (SELECT rowid FROM chat_cache"
    " ORDER BY created_at DESC, rowid DESC LIMIT {p} OFFSET {p})"
)


class Bounds(Protocol):
    """The index's bounds, which a store holds (and may lower at run time)."""

    cache_max_entries: int  # negative: no bound
    cache_max_age_ms: int


def lookup(mark: str) -> str:
    """The completion that answers a key, if fresh: parameters (key, oldest created_at)."""
    return _LOOKUP.format(p=mark)


def upkeep(mark: str, bounds: Bounds, now: int, most: int | None) -> list[Sql]:
    """What bounds the index: at most `most` rows of each statement (SQLite's -1 and
    PostgreSQL's None: all)."""
    expire = (_EXPIRE.format(p=mark), [(now - bounds.cache_max_age_ms, most)])
    if bounds.cache_max_entries < 0:  # no bound (SQLite's LIMIT -1, as before)
        return [expire]
    return [expire, (_TRIM.format(p=mark), [(most, bounds.cache_max_entries)])]
