"""Migration 0009 on a log written by hand: a speech request's summaries row and its
`speeches` view row, from its events alone (completed, failed, cancelled, running), the same
on SQLite and on PostgreSQL (whose own triggers index the copied events), and the rebuild
over a log that was written before the migration."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from alembic import command

from omni.db import alembic_config, upgrade
from tests.inspect.test_postgres import copy, pg_rows, sqlite_rows
from tests.postgres import database

IDS = ["spch-done", "spch-broke", "spch-left", "spch-running"]


def _append(
    conn: sqlite3.Connection, stream: str, seq: int, type_: str, data: dict, at: int
) -> None:
    conn.execute(
        "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
        (stream, seq, type_, json.dumps(data), at),
    )


def _log(path: Path, revision: str = "head") -> None:
    """Four speech requests, each ended its own way (one still running)."""
    command.upgrade(alembic_config(str(path)), revision)
    with sqlite3.connect(path) as conn:
        for n, sid in enumerate(IDS):
            body = {"model": "tts-1", "input": "Hola.", "response_format": "opus"}
            request = {"kind": "speech", "model": "kokoro", "body": body, "voice": "ef_dora",
                       "input_chars": 5, "owner": "alice"}  # fmt: skip
            _append(conn, f"{sid}/request", 0, "omni.request.accepted", request, 1000 * n)
            _append(conn, sid, 0, "speech.in_progress", {"id": sid}, 1000 * n)
        done = {"model": "kokoro", "duration_s": 0.175, "samples": 4200, "bytes": 1234,
                "usage": {"input_tokens": 5, "output_tokens": 0, "total_tokens": 5},
                "timings": {"queued_at": 0, "started_at": 5}}  # fmt: skip
        _append(conn, "spch-done", 1, "speech.completed", done, 40)
        for sid, code in (("spch-broke", "server_error"), ("spch-left", "cancelled")):
            error = {"message": "why", "code": code}
            _append(conn, sid, 1, "speech.failed", {"model": "kokoro", "error": error}, 3000)


SUMMARIES = (
    "SELECT id, kind, status, model, input_tokens, started_at, finished_at, error_code"
    " FROM summaries ORDER BY position"
)
VIEW = "SELECT * FROM speeches ORDER BY created_ms, id"


def test_each_ending_in_summaries_and_the_view(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with sqlite3.connect(path) as conn:
        rows = conn.execute(SUMMARIES).fetchall()
        view = conn.execute(
            "SELECT id, status, voice, response_format, input_chars, input_tokens, duration_s,"
            " bytes, queued_ms, total_ms FROM speeches ORDER BY created_ms"
        ).fetchall()
    assert rows == [
        ("spch-done", "speech", "completed", "kokoro", 5, 5, 40, None),
        ("spch-broke", "speech", "failed", "kokoro", None, 1000, 3000, "server_error"),
        ("spch-left", "speech", "cancelled", "kokoro", None, 2000, 3000, "cancelled"),
        ("spch-running", "speech", "in_progress", "tts-1", None, 3000, None, None),
    ]
    assert view[0] == ("spch-done", "completed", "ef_dora", "opus", 5, 5, 0.175, 1234, 5, 40)
    assert [v[1] for v in view] == ["completed", "failed", "cancelled", "in_progress"]


def test_the_rebuild_folds_a_log_written_before_the_migration(tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    _log(fresh)
    _log(old, "0007")
    command.upgrade(alembic_config(str(old)), "head")
    assert sqlite_rows(old, SUMMARIES) == sqlite_rows(fresh, SUMMARIES)
    assert sqlite_rows(old, VIEW) == sqlite_rows(fresh, VIEW)
    command.downgrade(alembic_config(str(old)), "0007")
    with sqlite3.connect(old) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "speeches" not in names and "summaries_on_speech_end" not in names


def test_the_speeches_view_on_postgresql(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with database("omni_speech") as url:
        upgrade(url)
        copy(path, url)
        for query in (SUMMARIES, VIEW):
            expected = sqlite_rows(path, query)
            assert len(expected) == 4 and pg_rows(url, query) == expected
