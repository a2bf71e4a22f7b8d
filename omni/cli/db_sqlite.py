"""`omni db check | backup | purge` on an SQLite log (omni/cli/db.py parses them)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from omni import db
from omni.cli.db_report import checked, objects, would_remove
from omni.errors import StoreError
from omni.events.sqlite import maintenance
from omni.service.retention import VOCABULARY


def check(path: str) -> int:
    if db.inspect(path, verify=False) is None and Path(path).is_file():
        raise StoreError(f"{path} holds no Omni log yet (`omni db upgrade` makes one)")
    with closing(maintenance.connect(path)) as conn:
        problems = maintenance.check(conn, VOCABULARY)
        streams, rows = conn.execute(
            "SELECT count(DISTINCT stream_id), count(*) FROM events"
        ).fetchone()
    return checked(path, problems, streams, rows)


def backup(path: str, target: str) -> int:
    maintenance.backup(path, target)
    print(f"omni: backed up {path} to {target}")
    return check(target)


def purge(path: str, before_ms: int, statuses: set[str] | None, dry_run: bool) -> int:
    db.inspect(path, verify=False)  # nothing is removed from a file that is not ours to write
    with closing(maintenance.connect(path)) as conn:
        if dry_run:
            doomed = maintenance.finished(conn, VOCABULARY, before_ms, statuses)
            return would_remove(doomed, lambda ids: maintenance.count_events(conn, ids))
        with maintenance.no_live_server(path):
            doomed = maintenance.finished(conn, VOCABULARY, before_ms, statuses)
            size = maintenance.file_bytes(path)
            events = maintenance.purge(conn, [f.id for f in doomed])
            maintenance.vacuum(conn)
            freed = size - maintenance.file_bytes(path)
    print(f"omni: removed {objects(doomed)}: {events} events, {max(freed, 0)} bytes reclaimed")
    return 0
