"""`omni db check | backup | purge`: the operator's side of the log, an SQLite file or a
PostgreSQL database (omni/db_postgres_commands.py)."""

from __future__ import annotations

import argparse
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

from omni import db
from omni.errors import StoreError
from omni.events.maintenance import Finished, parse_duration, parse_moment
from omni.events.sqlite import maintenance
from omni.location import is_postgres
from omni.service.retention import STATUSES, VOCABULARY

DB_HELP = "SQLite file or postgresql:// URL (default: %(default)s)"


def add_parsers(dbsub: Any, default_db: str) -> None:
    """The subcommands, on `omni db`'s subparsers."""
    check = dbsub.add_parser("check", help="check the log's integrity and invariants")
    check.add_argument("--db", default=default_db, help=DB_HELP)

    backup = dbsub.add_parser("backup", help="copy the log online (safe while a server writes)")
    backup.add_argument("path", help="the new file (never overwritten)")
    backup.add_argument("--db", default=default_db, help=DB_HELP)

    purge = dbsub.add_parser(
        "purge", help="remove finished or deleted responses and completions, then reclaim space"
    )
    purge.add_argument("--db", default=default_db, help=DB_HELP)
    when = purge.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--older-than",
        type=_parsed(parse_duration),
        metavar="DURATION",
        help="ended longer ago than this: 30d, 12h, 90m",
    )
    when.add_argument(
        "--before",
        type=_parsed(parse_moment),
        metavar="DATE",
        help="ended before this ISO date or date-time (local time unless it names a zone)",
    )
    purge.add_argument(
        "--status",
        action="append",
        type=_statuses,
        help=f"only these ({', '.join(STATUSES)}); repeatable or comma-separated (default: all)",
    )
    purge.add_argument("--dry-run", action="store_true", help="list what would go, remove nothing")


def run(args: argparse.Namespace) -> int:
    """Run `omni db <check|backup|purge>`; the exit status."""
    try:
        return _run(args)
    except sqlite3.Error as exc:  # not an Omni log, or one of an older schema
        hint = "is it an Omni log? `omni db upgrade` migrates one"
        raise StoreError(f"{args.db}: {exc} ({hint})") from None


def _run(args: argparse.Namespace) -> int:
    if is_postgres(args.db):
        from omni import db_postgres_commands

        return db_postgres_commands.run(args)
    if args.db_command == "check":
        return _check(args.db)
    if args.db_command == "backup":
        maintenance.backup(args.db, args.path)
        print(f"omni: backed up {args.db} to {args.path}")
        return _check(args.path)
    before, statuses = purge_bounds(args)
    return _purge(args.db, before, statuses, args.dry_run)


def purge_bounds(args: argparse.Namespace) -> tuple[int, set[str] | None]:
    """`omni db purge`'s cut-off (unix ms) and statuses (None: all)."""
    before = args.before if args.before is not None else int((time.time() - args.older_than) * 1000)
    statuses = None if args.status is None else {s for group in args.status for s in group}
    return before, statuses


def _check(path: str) -> int:
    if db.inspect(path, verify=False) is None and Path(path).is_file():
        raise StoreError(f"{path} holds no Omni log yet (`omni db upgrade` makes one)")
    with closing(maintenance.connect(path)) as conn:
        problems = maintenance.check(conn, VOCABULARY)
        streams, rows = conn.execute(
            "SELECT count(DISTINCT stream_id), count(*) FROM events"
        ).fetchone()
    for p in problems:
        print(f"{p.stream_id or path}: {p.what}")
    if problems:
        print(f"omni: {path}: {len(problems)} problems")
        return 1
    print(f"omni: {path} is sound ({rows} events in {streams} streams)")
    return 0


def _purge(path: str, before_ms: int, statuses: set[str] | None, dry_run: bool) -> int:
    db.inspect(path, verify=False)  # nothing is removed from a file that is not ours to write
    with closing(maintenance.connect(path)) as conn:
        if dry_run:
            doomed = maintenance.finished(conn, VOCABULARY, before_ms, statuses)
            for f in doomed:
                ended = datetime.fromtimestamp(f.ended_at / 1000).isoformat(timespec="seconds")
                print(f"{f.id}\t{f.status}\t{ended}")
            events = maintenance.count_events(conn, [f.id for f in doomed])
            print(f"omni: would remove {objects(doomed)}: {events} events")
            return 0
        with maintenance.no_live_server(path):
            doomed = maintenance.finished(conn, VOCABULARY, before_ms, statuses)
            size = maintenance.file_bytes(path)
            events = maintenance.purge(conn, [f.id for f in doomed])
            maintenance.vacuum(conn)
            freed = size - maintenance.file_bytes(path)
    print(f"omni: removed {objects(doomed)}: {events} events, {max(freed, 0)} bytes reclaimed")
    return 0


def objects(doomed: list[Finished]) -> str:
    responses = sum(f.id.startswith("resp_") for f in doomed)
    return f"{responses} responses, {len(doomed) - responses} completions"


def _parsed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parsed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parsed


def _statuses(text: str) -> set[str]:
    given = {s.strip() for s in text.split(",") if s.strip()}
    unknown = given - set(STATUSES)
    if unknown or not given:
        raise argparse.ArgumentTypeError(f"{text!r}: expected statuses among {', '.join(STATUSES)}")
    return given
