"""The log opened for reading only: the CLI never writes, never migrates, never needs the
server's lock, so it reads a log whose server is up, stopped, or was killed. An SQLite file,
or a PostgreSQL database (its sessions read-only)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from omni.errors import StoreError
from omni.location import is_postgres, postgres_url, require_driver

NEEDED = ("summaries", "responses", "chat_completions", "timeline")  # migration 0005's


def open_log(path: str) -> Engine:
    """An engine on the log at `path`, read-only. Without a WAL beside it the file is all
    there is: it is read as immutable, which creates no -wal or -shm file."""
    if is_postgres(path):
        require_driver()
        return create_engine(
            postgres_url(path),
            poolclass=NullPool,
            connect_args={"options": "-c default_transaction_read_only=on"},
        )
    file = Path(path)
    if not file.is_file():
        raise StoreError(f"no database at {path} (give --db the server's log)")
    uri = file.absolute().as_uri()

    def connect() -> sqlite3.Connection:
        mode = "mode=ro" if Path(f"{path}-wal").exists() else "immutable=1"
        return sqlite3.connect(f"{uri}?{mode}", uri=True, check_same_thread=False)

    return create_engine("sqlite://", creator=connect, poolclass=NullPool)


def missing(conn: Connection) -> list[str]:
    """What of the inspector's schema the log lacks (a log older than migration 0005)."""
    query = "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
    if conn.dialect.name == "postgresql":
        query = (
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    names = {str(n) for (n,) in conn.execute(text(query))}
    return [n for n in NEEDED if n not in names]
