"""`omni db upgrade | check | backup | purge`: the operator's side of the log, an SQLite file
(omni/cli/db_sqlite.py) or a PostgreSQL database (omni/cli/db_postgres.py)."""

from __future__ import annotations

import argparse
import sqlite3
import time
from typing import Any, Protocol

from omni import db
from omni.cli import db_postgres, db_sqlite
from omni.cli.options import DB_HELP, parsed
from omni.errors import StoreError
from omni.events.maintenance import parse_duration, parse_moment
from omni.location import is_postgres, shown
from omni.service.retention import STATUSES

HELP = "SQLite file or postgresql:// URL (default: %(default)s)"


def add_parsers(sub: Any, default_db: str) -> None:
    """`omni db` and its subcommands, on `omni`'s subparsers."""
    dbp = sub.add_parser("db", help="database maintenance")
    dbsub = dbp.add_subparsers(dest="db_command", required=True)
    up = dbsub.add_parser("upgrade", help="apply the schema migrations")
    up.add_argument("--db", default=default_db, help=DB_HELP)

    check = dbsub.add_parser("check", help="check the log's integrity and invariants")
    check.add_argument("--db", default=default_db, help=HELP)

    backup = dbsub.add_parser("backup", help="copy the log online (safe while a server writes)")
    backup.add_argument("path", help="the new file (never overwritten)")
    backup.add_argument("--db", default=default_db, help=HELP)

    purge = dbsub.add_parser(
        "purge", help="remove finished or deleted responses and completions, then reclaim space"
    )
    purge.add_argument("--db", default=default_db, help=HELP)
    when = purge.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--older-than",
        type=parsed(parse_duration),
        metavar="DURATION",
        help="ended longer ago than this: 30d, 12h, 90m",
    )
    when.add_argument(
        "--before",
        type=parsed(parse_moment),
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
    """Run `omni db <upgrade|check|backup|purge>`; the exit status."""
    if args.db_command == "upgrade":
        db.upgrade(args.db)
        print(f"omni: database {shown(args.db)} is at the newest schema")
        return 0
    try:
        return _run(args)
    except sqlite3.Error as exc:  # not an Omni log, or one of an older schema
        hint = "is it an Omni log? `omni db upgrade` migrates one"
        raise StoreError(f"{args.db}: {exc} ({hint})") from None


class _Backend(Protocol):
    """What each store's module (db_sqlite, db_postgres) does for these commands."""

    def check(self, where: str, /) -> int: ...
    def backup(self, where: str, target: str, /) -> int: ...
    def purge(
        self, where: str, before_ms: int, statuses: set[str] | None, dry_run: bool, /
    ) -> int: ...


def _run(args: argparse.Namespace) -> int:
    backend: _Backend = db_postgres if is_postgres(args.db) else db_sqlite
    if args.db_command == "check":
        return backend.check(args.db)
    if args.db_command == "backup":
        return backend.backup(args.db, args.path)
    before, statuses = purge_bounds(args)
    return backend.purge(args.db, before, statuses, args.dry_run)


def purge_bounds(args: argparse.Namespace) -> tuple[int, set[str] | None]:
    """`omni db purge`'s cut-off (unix ms) and statuses (None: all)."""
    before = args.before if args.before is not None else int((time.time() - args.older_than) * 1000)
    statuses = None if args.status is None else {s for group in args.status for s in group}
    return before, statuses


def _statuses(text: str) -> set[str]:
    given = {s.strip() for s in text.split(",") if s.strip()}
    unknown = given - set(STATUSES)
    if unknown or not given:
        raise argparse.ArgumentTypeError(f"{text!r}: expected statuses among {', '.join(STATUSES)}")
    return given
