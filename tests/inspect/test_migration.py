"""Migration 0005 up and down on a log that already holds a real server's events: the
projection is rebuilt from them, equal to what the triggers made live; down leaves 0004."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from omni.db import alembic_config
from tests.inspect.conftest import Log

OURS = {
    ("table", "summaries"),
    ("view", "responses"),
    ("view", "chat_completions"),
    ("view", "timeline"),
}


def _schema(path: Path) -> set[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return set(
            conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        )


def _rows(path: Path, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(query).fetchall()


def test_up_rebuilds_from_the_log_and_down_drops_it_all(log: Log, tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    cfg = alembic_config(str(old))
    command.upgrade(cfg, "0004")
    before = _schema(old)
    assert not before & OURS
    with sqlite3.connect(old) as conn:  # the real log's events, written before 0005 existed
        conn.execute("ATTACH DATABASE ? AS live", (str(log.db),))
        conn.execute("INSERT INTO events SELECT * FROM live.events ORDER BY position")
    live = _rows(log.db, "SELECT * FROM summaries ORDER BY id")
    assert len(live) > 5

    command.upgrade(cfg, "0005")
    assert OURS <= _schema(old)
    assert _rows(old, "SELECT * FROM summaries ORDER BY id") == live
    statuses = _rows(log.db, "SELECT id, status, output_text FROM responses ORDER BY id")
    assert _rows(old, "SELECT id, status, output_text FROM responses ORDER BY id") == statuses

    command.downgrade(cfg, "0004")
    assert _schema(old) == before  # its table, indexes, triggers and views: gone
    events = _rows(log.db, "SELECT count(*) FROM events")
    assert _rows(old, "SELECT count(*) FROM events") == events
    command.upgrade(cfg, "head")
    assert _rows(old, "SELECT * FROM summaries ORDER BY id") == live


def test_a_row_that_is_not_json_is_still_appended(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    command.upgrade(alembic_config(str(path)), "head")
    with sqlite3.connect(path) as conn:
        for type_ in ("omni.request.accepted", "response.completed", "chat.completion.chunk"):
            conn.execute(
                "INSERT INTO events (stream_id, seq, type, data, created_at)"
                " VALUES ('resp_x/request', 0, ?, 'not json', 1)",
                (type_,),
            )
            conn.execute("DELETE FROM events")
    assert _rows(path, "SELECT count(*) FROM summaries") == [(0,)]
