"""What the SQL stores and their parts share: statements as data, the driver's errors in
words, the clock of `created_at` (and of the cache's ages and the leases' expiries)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

Sql = tuple[str, list[tuple[Any, ...]]]  # a statement and the parameters of each execution


def now_ms() -> int:
    return int(time.time() * 1000)


def reason(exc: SQLAlchemyError) -> object:
    """The driver's own message where there is one (it names the real cause)."""
    return getattr(exc, "orig", None) or exc


def execute(conn: Connection, statements: Sequence[Sql]) -> None:
    """Run `statements` in the writer's transaction (the loop's path runs the same SQL)."""
    for sql, params in statements:
        conn.exec_driver_sql(sql, params)
