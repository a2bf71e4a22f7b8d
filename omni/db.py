"""Schema upgrades through Alembic (`omni db upgrade`, and `omni serve` on start)."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path

from alembic import command
from alembic.config import Config

from omni.errors import StoreError

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(db_path: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", f"sqlite:///{db_path}")
    return cfg


def upgrade(db_path: str) -> None:
    """Bring the database at db_path to the newest schema, creating it if needed."""
    path = Path(db_path)
    if path.parent and not path.parent.exists():
        raise StoreError(f"cannot open database {db_path}: folder {path.parent} does not exist")
    try:
        # Probe writability with the plain driver first: a one-line error beats a traceback.
        # Closed here: sqlite3's own `with` only commits, and a connection left open for the
        # server's life kept SQLite from removing the WAL when the server stopped.
        with closing(sqlite3.connect(db_path)) as conn, conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS _omni_probe (x)")
            conn.execute("DROP TABLE _omni_probe")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot write database {db_path}: {exc}") from exc
    logging.getLogger("alembic").setLevel(logging.WARNING)
    command.upgrade(alembic_config(db_path), "head")
