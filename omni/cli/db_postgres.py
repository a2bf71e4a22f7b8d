"""`omni db check | backup | purge` on a PostgreSQL log (omni/cli/db.py parses them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from omni import db
from omni.cli.db_report import checked, objects, would_remove
from omni.errors import StoreError
from omni.events.postgres import maintenance as pg_maintenance
from omni.location import shown
from omni.service.retention import VOCABULARY


def check(url: str) -> int:
    with _opened(url) as engine:
        with engine.connect() as conn:
            problems = pg_maintenance.check(conn, VOCABULARY)
            streams, rows = pg_maintenance.counts(conn)
        return checked(shown(url), problems, streams, rows)


def backup(url: str, target: str) -> int:
    raise StoreError(pg_maintenance.BACKUP)


def purge(url: str, before_ms: int, statuses: set[str] | None, dry_run: bool) -> int:
    """No lock against a live server: a PostgreSQL store keeps no rows in memory, and each
    purge transaction holds the log's lock as an append does."""
    with _opened(url) as engine:
        with engine.connect() as conn:
            doomed = pg_maintenance.finished(conn, VOCABULARY, before_ms, statuses)
            if dry_run:
                return would_remove(doomed, lambda ids: pg_maintenance.count_events(conn, ids))
            conn.rollback()  # the listing's transaction: each purge batch is one of its own
            events = pg_maintenance.purge(conn, [f.id for f in doomed])
        with engine.connect() as conn:
            pg_maintenance.vacuum(conn)
        print(
            f"omni: removed {objects(doomed)}: {events} events"
            " (their space is reused by later appends: VACUUM ran)"
        )
    return 0


@contextmanager
def _opened(url: str) -> Iterator[Any]:
    """The log's engine, once it is known to hold an Omni log."""
    if db.inspect(url, verify=False) is None:
        raise StoreError(f"{shown(url)} holds no Omni log yet (`omni db upgrade` makes one)")
    with pg_maintenance.opened(url) as engine:
        yield engine
