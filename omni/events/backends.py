"""The store a `--db` names: SQLite's EventStore for a file, PostgresStore for a URL."""

from __future__ import annotations

from typing import TypeAlias

from omni.events.notifier import Notifier
from omni.events.postgres.store import PostgresStore
from omni.events.sqlite.store import EventStore
from omni.location import is_postgres

# What the server holds: either store, with what each has beyond the contract in common
# (check_file, run_read, the cache's bounds).
LogStore: TypeAlias = EventStore | PostgresStore


def make_store(
    db: str,
    notifier: Notifier,
    *,
    synchronous: str = "NORMAL",
    cache_max_entries: int = 1024,
    cache_max_age_s: float = 86400.0,
) -> LogStore:
    """Unopened. On PostgreSQL the store also wakes `notifier` for other processes' commits
    (SQLite's store is the file's only writer: the Appender's wake-ups are all there are)."""
    if is_postgres(db):
        return PostgresStore(
            db,
            notifier=notifier,
            synchronous=synchronous,
            cache_max_entries=cache_max_entries,
            cache_max_age_s=cache_max_age_s,
        )
    return EventStore(
        db,
        synchronous=synchronous,
        cache_max_entries=cache_max_entries,
        cache_max_age_s=cache_max_age_s,
    )
