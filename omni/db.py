"""Schema upgrades through Alembic (`omni db upgrade`, and `omni serve` on start), of an
SQLite file or a PostgreSQL database (omni/db_postgres.py: `db_path` is then its URL).

Before anything writes to a file that exists, it is read (read-only) and refused whole,
with one line, if it is not ours to write: not SQLite, another program's database, a schema
newer than this Omni knows, or damaged.
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from omni import db_postgres
from omni.errors import StoreError, UnusableDatabase
from omni.location import is_postgres, postgres_url, shown

# Inside the package, so that an install from a wheel or an sdist carries them; alembic.ini
# at the repository's root points here too, for developers' `alembic` commands.
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
# "database disk image is malformed"; "file is not a database" (an encrypted one, say).
_DAMAGED = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def alembic_config(db_path: str) -> Config:
    """The settings alembic.ini holds, built here: an installed Omni has no alembic.ini."""
    cfg = Config()
    # ConfigParser interpolates '%': a path may hold one.
    cfg.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    url = postgres_url(db_path) if is_postgres(db_path) else f"sqlite:///{db_path}"
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def inspect(db_path: str, verify: bool = True) -> str | None:
    """The schema revision of the log at db_path, read without writing to it; None where
    there is no log yet (no file, an empty one, an SQLite file without tables). Raises
    UnusableDatabase for a file this Omni must not write; `verify`: SQLite's quick_check
    reads every page first (a damaged one is found now, not by a request)."""
    if is_postgres(db_path):
        tables, rows = db_postgres.versions(db_path)
        return _judged(shown(db_path), tables, rows, db_path) if tables else None
    path = Path(db_path)
    if not path.is_file() or path.stat().st_size == 0:
        return None  # nothing yet (or not a file: the write probe says so)
    try:
        with path.open("rb") as file:
            header = file.read(len(_HEADER))
    except OSError as exc:
        raise StoreError(f"cannot read database {db_path}: {exc.strerror}") from None
    if header != _HEADER:
        raise UnusableDatabase(f"{db_path} is not an SQLite database; give --db an Omni log")
    # Without a WAL beside it the file is all there is: read it as immutable, which creates
    # no -wal or -shm file (mode=ro would, and leave them). `omni serve` holds the lock
    # (omni/lock.py): no other server writes it meanwhile.
    mode = "mode=ro" if Path(f"{db_path}-wal").exists() else "immutable=1"
    try:
        with closing(sqlite3.connect(f"{path.absolute().as_uri()}?{mode}", uri=True)) as conn:
            return _revision(db_path, conn, verify)
    except sqlite3.Error as exc:
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _DAMAGED:
            raise UnusableDatabase(
                f"{db_path} is damaged ({exc}); restore it from a backup"
            ) from None
        raise StoreError(f"cannot read database {db_path}: {exc}") from None


def _revision(db_path: str, conn: sqlite3.Connection, verify: bool) -> str | None:
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return None
    rows = []
    if "alembic_version" in tables:
        rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    revision = _judged(db_path, tables, rows, db_path)
    if verify:
        found = [str(row[0]) for row in conn.execute("PRAGMA quick_check(1)")]
        if found != ["ok"]:
            problem = found[0].splitlines()[-1]  # past "*** in database main ***"
            raise UnusableDatabase(f"{db_path} is damaged ({problem}); restore it from a backup")
    return revision


def _judged(name: str, tables: set[str], rows: list[Any], db_path: str) -> str | None:
    """The revision of a log with these tables and these rows of Alembic's table, named
    `name` in what it raises: UnusableDatabase for another program's database, or a schema
    newer than this Omni knows."""
    # Ours: Alembic's table with the log's, or Alembic's alone and empty (a first upgrade cut off).
    if "alembic_version" not in tables or (rows and "events" not in tables):
        names = ", ".join(sorted(tables)[:5])
        raise UnusableDatabase(f"{name} is not an Omni log (its tables: {names})")
    revision = str(rows[0][0]) if rows else None
    script = ScriptDirectory.from_config(alembic_config(db_path))
    if revision is not None and revision not in {r.revision for r in script.walk_revisions()}:
        raise UnusableDatabase(
            f"{name} has schema version {revision}, newer than this Omni (knows up to "
            f"{script.get_current_head()}); upgrade Omni"
        )
    return revision


def upgrade(db_path: str, verify: bool = True) -> None:
    """Bring the database at db_path to the newest schema, creating it if needed; refuses
    (UnusableDatabase, nothing written) a file inspect() refuses."""
    if is_postgres(db_path):
        _upgrade_postgres(db_path)
        return
    path = Path(db_path)
    if path.parent and not path.parent.exists():
        raise StoreError(f"cannot open database {db_path}: folder {path.parent} does not exist")
    inspect(db_path, verify)
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
    try:
        command.upgrade(alembic_config(db_path), "head")
    except CommandError as exc:  # a revision it cannot reach, say
        raise StoreError(f"cannot upgrade database {db_path}: {exc}") from exc


def _upgrade_postgres(url: str) -> None:
    """A PostgreSQL log: refused as inspect() refuses it, else migrated (one upgrade at a
    time: migrations/env.py holds an advisory lock through it)."""
    inspect(url)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        command.upgrade(alembic_config(url), "head")
    except CommandError as exc:
        raise StoreError(f"cannot upgrade database {shown(url)}: {exc}") from exc
    except Exception as exc:  # the driver's, through SQLAlchemy: one line, not a traceback
        cause = getattr(exc, "orig", None) or exc
        raise StoreError(f"cannot upgrade database {shown(url)}: {cause}") from exc


def discard_unused(db_path: str) -> None:
    """Remove the database at db_path, with its -wal and -shm files, if it holds no event.
    For a start that created it and then failed: it leaves no empty database behind. Never
    called on a database that existed before that start (nor on PostgreSQL: a database
    there is made by its operator, not by Omni)."""
    if is_postgres(db_path) or not Path(db_path).is_file():
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
