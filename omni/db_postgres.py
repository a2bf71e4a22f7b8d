"""Schema upgrades of a PostgreSQL log: the same Alembic migrations as SQLite's (they branch on
the dialect), and what omni/db.py reads before anything is written, to refuse as it refuses
an SQLite file a database holding another program's tables, or a schema newer than this
Omni knows. The file checks of SQLite (its header, quick_check, WAL) have no counterpart:
the server keeps its own pages sound."""

from __future__ import annotations

from typing import Any

from omni.errors import StoreError
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


def versions(db: str) -> tuple[set[str], list[Any]]:
    """The database's tables and the rows of Alembic's version table, read only (no tables:
    an Omni log yet to be made); omni/db.py judges them as it judges an SQLite file's."""
    with connect(db, autocommit=True) as conn:
        tables = {
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        }
        rows = []
        if "alembic_version" in tables:
            rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    return tables, rows
