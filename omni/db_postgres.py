"""Schema upgrades of a PostgreSQL log: the same Alembic migrations as SQLite's (they branch on
the dialect), and the same refusals before anything is written: a database holding another
program's tables, or a schema newer than this Omni knows. The file checks of SQLite (its
header, quick_check, WAL) have no counterpart: the server keeps its own pages sound."""

from __future__ import annotations

from typing import Any

from alembic.script import ScriptDirectory

from omni.errors import StoreError, UnusableDatabase
from omni.location import conninfo, require_driver, shown

# The key of the advisory lock that one upgrade holds (migrations/env.py): replicas that
# start together migrate one after the other.
MIGRATION_LOCK = 0x6F6D6E69_0001  # "omni", 1


def connect(db: str, **kwargs: Any) -> Any:
    """A psycopg connection, or StoreError in one line (no server, no database, refused)."""
    psycopg = require_driver()
    try:
        return psycopg.connect(conninfo(db), connect_timeout=10, **kwargs)
    except psycopg.Error as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreError(f"cannot open database {shown(db)}: {message}") from None


def revision(db: str, script: ScriptDirectory) -> str | None:
    """The schema revision of the log, read only; None for a database without tables (an
    Omni log yet to be made). Raises UnusableDatabase for one this Omni must not write."""
    with connect(db, autocommit=True) as conn:
        tables = {
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        }
        if not tables:
            return None
        rows = []
        if "alembic_version" in tables:
            rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    if "alembic_version" not in tables or (rows and "events" not in tables):
        names = ", ".join(sorted(tables)[:5])
        raise UnusableDatabase(f"{shown(db)} is not an Omni log (its tables: {names})")
    found = str(rows[0][0]) if rows else None
    if found is not None and found not in {r.revision for r in script.walk_revisions()}:
        raise UnusableDatabase(
            f"{shown(db)} has schema version {found}, newer than this Omni (knows up to "
            f"{script.get_current_head()}); upgrade Omni"
        )
    return found


def missing(db: str, names: tuple[str, ...]) -> list[str]:
    """Which of these tables and views the log lacks."""
    with connect(db, autocommit=True) as conn:
        have = {
            str(n)
            for (n,) in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            )
        }
    return [n for n in names if n not in have]
