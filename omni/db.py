"""Schema upgrades through Alembic (`omni db upgrade`, and `omni serve` on start)."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path

from alembic import command
from alembic.config import Config

from omni.errors import StoreError

# Inside the package, so that an install from a wheel or an sdist carries them; alembic.ini
# at the repository's root points here too, for developers' `alembic` commands.
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(db_path: str) -> Config:
    """The settings alembic.ini holds, built here: an installed Omni has no alembic.ini."""
    cfg = Config()
    # ConfigParser interpolates '%': a path may hold one.
    cfg.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    cfg.set_main_option("sqlalchemy.url", f"sqlite:///{db_path}".replace("%", "%%"))
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


def discard_unused(db_path: str) -> None:
    """Remove the database at db_path, with its -wal and -shm files, if it holds no event.
    For a start that created it and then failed: it leaves no empty database behind. Never
    called on a database that existed before that start."""
    if not Path(db_path).is_file():
        return
    try:
        with closing(sqlite3.connect(db_path)) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            if "events" in tables and conn.execute("SELECT 1 FROM events LIMIT 1").fetchone():
                return
    except sqlite3.Error:
        return  # not a database this start made: leave it
    for suffix in ("", "-wal", "-shm"):
        Path(db_path + suffix).unlink(missing_ok=True)
