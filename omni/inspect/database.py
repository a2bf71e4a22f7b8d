"""The log file opened for reading only: the CLI never writes, never migrates, never needs the
server's lock, so it reads a log whose server is up, stopped, or was killed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from omni.errors import StoreError

NEEDED = ("summaries", "responses", "chat_completions", "timeline")  # migration 0005's


def open_log(path: str) -> Engine:
    """An engine on the log at `path`, read-only. Without a WAL beside it the file is all
    there is: it is read as immutable, which creates no -wal or -shm file."""
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
    names = {
        str(n)
        for (n,) in conn.execute(
            text("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        )
    }
    return [n for n in NEEDED if n not in names]
