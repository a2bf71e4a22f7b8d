"""A real PostgreSQL for the tests: OMNI_TEST_POSTGRES names the server (an administrator's
URL; default the loopback server, user postgres), and each run makes databases of its own,
uniquely named, and drops them after."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import make_url

ADMIN = os.environ.get("OMNI_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
# What a test starts from: every table of the log empty, positions from 1 again.
TABLES = ("events", "items", "chat_cache", "summaries", "search", "leases")


def url_of(name: str) -> str:
    return make_url(ADMIN).set(database=name).render_as_string(hide_password=False)


@contextmanager
def database(prefix: str = "omni_test") -> Iterator[str]:
    """A new, empty database (its URL), dropped at the end even while connections remain."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url_of(name)
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def empty(url: str) -> None:
    """Every table of a migrated log emptied (faster than a database per test)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY")


def rows(url: str, sql: str, *params: object) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params or None).fetchall()  # type: ignore[arg-type]
