"""Where the log lives, as `--db` (or OMNI_DB) names it: an SQLite file (a path, or an
`sqlite:///…` URL) or a PostgreSQL database (`postgresql://…`, `postgresql+psycopg://…`,
`postgresql+asyncpg://…`). Omni talks to PostgreSQL through psycopg 3 whichever scheme is
given: one driver serves Alembic's sync migrations, the async server and LISTEN/NOTIFY."""

from __future__ import annotations

from typing import Any

from omni.errors import StoreError

POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgresql+asyncpg")
SQLITE_SCHEMES = ("sqlite", "sqlite+aiosqlite", "sqlite+pysqlite")
INSTALL = "pip install 'omni-mlx[postgres]'"


def _scheme(db: str) -> str:
    head, sep, _ = db.partition("://")
    return head.lower() if sep else ""


def is_postgres(db: str) -> bool:
    return _scheme(db) in POSTGRES_SCHEMES


def sqlite_path(db: str) -> str:
    """The file an SQLite `--db` names: a path as it is, `sqlite:///rel.db` → rel.db and
    `sqlite:////abs/omni.db` → /abs/omni.db (SQLAlchemy's spelling)."""
    if _scheme(db) not in SQLITE_SCHEMES:
        return db
    rest = db.split("://", 1)[1]
    if not rest.startswith("/") or rest == "/":
        raise StoreError(f"{db}: expected sqlite:///PATH (three slashes, then the file's path)")
    return rest[1:]


def normal(db: str) -> str:
    """`--db` as the rest of Omni takes it: an SQLite file's path, or a PostgreSQL URL."""
    return db if is_postgres(db) else sqlite_path(db)


def postgres_url(db: str) -> str:
    """SQLAlchemy's URL for the psycopg 3 driver (it serves sync and async engines)."""
    from sqlalchemy.engine import make_url

    url = make_url(db)
    return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def conninfo(db: str) -> str:
    """The libpq connection string of a PostgreSQL URL, for psycopg's own connections."""
    from sqlalchemy.engine import make_url

    url = make_url(db)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def shown(db: str) -> str:
    """The location for a message or a log line: a URL's password never shows."""
    if not is_postgres(db):
        return db
    from sqlalchemy.engine import make_url

    try:
        return make_url(db).render_as_string(hide_password=True)
    except Exception:  # a malformed URL: the connection attempt says so, without it
        return "the PostgreSQL database"


def require_driver() -> Any:
    """psycopg, or a StoreError naming the install command (it is an optional extra)."""
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            f"PostgreSQL needs the psycopg driver, which is not installed: {INSTALL}"
        ) from None
    return psycopg
