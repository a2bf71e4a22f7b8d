"""The inspector's schema on PostgreSQL holds what SQLite's holds: a real server's log (the
module's `log`, written on SQLite) and a hand-written log of embeddings, copied event by event
into PostgreSQL, whose own triggers make the projections there. Every view and `summaries`
then hold equal rows, column by column, and the Inspector reads the same from both."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from omni.db import upgrade
from omni.inspect import Inspector, open_log
from omni.inspect.turns import turns
from tests.inspect.conftest import Log
from tests.inspect.test_embeddings_projection import _log as embeddings_log
from tests.postgres import database

VIEWS = {  # each view (and the projection under them) in a stable order
    "summaries": "position",
    "responses": "created_ms, id",
    "chat_completions": "created_ms, id",
    "timeline": "position",
    "embeddings": "created_ms, id",
}


def copy(path: Path, url: str) -> int:
    """Every event of the SQLite log at `path`, in position order, into the PostgreSQL log
    (positions and times as they were); its triggers index each as it comes."""
    with sqlite3.connect(path) as source:
        events = source.execute(
            "SELECT position, stream_id, seq, type, data, created_at FROM events ORDER BY position"
        ).fetchall()
    with psycopg.connect(url) as conn:
        for event in events:
            conn.execute(
                "INSERT INTO events (position, stream_id, seq, type, data, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                event,
            )
    return len(events)


def sqlite_rows(path: Path, query: str) -> list[dict[str, Any]]:
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute(query)]


def pg_rows(url: str, query: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(query).fetchall()


@pytest.fixture(scope="module")
def copied(log: Log) -> Iterator[str]:
    with database("omni_views") as url:
        upgrade(url)
        assert copy(log.db, url) > 0
        yield url


@pytest.mark.parametrize("view", [v for v in VIEWS if v != "embeddings"])  # the server's log
def test_every_view_holds_the_same_rows_on_both(log: Log, copied: str, view: str) -> None:
    query = f"SELECT * FROM {view} ORDER BY {VIEWS[view]}"
    on_sqlite, on_postgres = sqlite_rows(log.db, query), pg_rows(copied, query)
    assert on_sqlite, f"{view} is empty: the fixture shows nothing"
    assert [list(r) for r in on_postgres] == [list(r) for r in on_sqlite]  # the same columns
    assert on_postgres == on_sqlite


def test_the_embeddings_view_on_both(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    embeddings_log(path)
    with database("omni_views") as url:
        upgrade(url)
        copy(path, url)
        for view in ("summaries", "embeddings"):
            query = f"SELECT * FROM {view} ORDER BY {VIEWS[view]}"
            expected = sqlite_rows(path, query)
            assert len(expected) == 4 and pg_rows(url, query) == expected


def test_the_inspector_reads_the_same_from_both(log: Log, copied: str) -> None:
    sqlite_engine, pg_engine = open_log(str(log.db)), open_log(copied)
    try:
        with sqlite_engine.connect() as a, pg_engine.connect() as b:
            on_sqlite, on_postgres = Inspector(a), Inspector(b)
            recent = on_sqlite.recent(limit=100)
            assert len(recent) > 5 and on_postgres.recent(limit=100) == recent
            assert on_postgres.recent(status="completed", owner="alice") == on_sqlite.recent(
                status="completed", owner="alice"
            )
            for summary in recent:
                assert on_postgres.detail(summary.id) == on_sqlite.detail(summary.id)
                assert on_postgres.timeline(summary.id, 2) == on_sqlite.timeline(summary.id, 2)
                for who in (None, "alice"):
                    assert turns(on_postgres, summary.id, who) == turns(on_sqlite, summary.id, who)
            chained = turns(on_postgres, log.responses["chained"].id, "alice")
            assert chained is not None and len(chained.turns) == 2
            assert on_postgres.stats() == on_sqlite.stats()
            assert on_postgres.since(0, limit=10_000) == on_sqlite.since(0, limit=10_000)
            assert on_postgres.last_position() == on_sqlite.last_position()
    finally:
        sqlite_engine.dispose()
        pg_engine.dispose()


def test_the_cli_sessions_on_postgresql_are_read_only(copied: str) -> None:
    engine = open_log(copied)
    try:
        with engine.connect() as conn, pytest.raises(Exception, match="read-only"):
            conn.exec_driver_sql("DELETE FROM events")
    finally:
        engine.dispose()
