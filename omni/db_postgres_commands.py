"""`omni db check | backup | purge` on a PostgreSQL log (db_commands.py parses them)."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from omni import db, db_commands
from omni.errors import StoreError
from omni.events.postgres import maintenance as pg_maintenance
from omni.location import shown
from omni.service.retention import VOCABULARY


def run(args: argparse.Namespace) -> int:
    if args.db_command == "backup":
        raise StoreError(pg_maintenance.BACKUP)
    if db.inspect(args.db, verify=False) is None:
        raise StoreError(f"{shown(args.db)} holds no Omni log yet (`omni db upgrade` makes one)")
    with pg_maintenance.opened(args.db) as engine:
        if args.db_command == "check":
            return _check(engine, shown(args.db))
        before, statuses = db_commands.purge_bounds(args)
        return _purge(engine, before, statuses, args.dry_run)


def _check(engine: Any, where: str) -> int:
    with engine.connect() as conn:
        problems = pg_maintenance.check(conn, VOCABULARY)
        streams, rows = pg_maintenance.counts(conn)
    for p in problems:
        print(f"{p.stream_id or where}: {p.what}")
    if problems:
        print(f"omni: {where}: {len(problems)} problems")
        return 1
    print(f"omni: {where} is sound ({rows} events in {streams} streams)")
    return 0


def _purge(engine: Any, before_ms: int, statuses: set[str] | None, dry_run: bool) -> int:
    """No lock against a live server: a PostgreSQL store keeps no rows in memory, and each
    purge transaction holds the log's lock as an append does."""
    with engine.connect() as conn:
        doomed = pg_maintenance.finished(conn, VOCABULARY, before_ms, statuses)
        if dry_run:
            for f in doomed:
                ended = datetime.fromtimestamp(f.ended_at / 1000).isoformat(timespec="seconds")
                print(f"{f.id}\t{f.status}\t{ended}")
            events = pg_maintenance.count_events(conn, [f.id for f in doomed])
            print(f"omni: would remove {db_commands.objects(doomed)}: {events} events")
            return 0
        conn.rollback()  # the listing's transaction: each purge batch is one of its own
        events = pg_maintenance.purge(conn, [f.id for f in doomed])
    with engine.connect() as conn:
        pg_maintenance.vacuum(conn)
    print(
        f"omni: removed {db_commands.objects(doomed)}: {events} events"
        " (their space is reused by later appends: VACUUM ran)"
    )
    return 0
