"""Migrations 0008 and 0010 on a log written by hand: a transcription's summaries row and its
`transcriptions` view row from its events alone (done, failed, cancelled, running), the same on
PostgreSQL (its own triggers, fed the same events), the same after a rebuild, and `omni ls`
and `omni show` listing them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from alembic import command

from omni.db import alembic_config, upgrade
from tests.inspect.test_postgres import copy, pg_rows, sqlite_rows
from tests.test_cli import omni


def _append(
    conn: sqlite3.Connection, stream: str, seq: int, type_: str, data: dict, at: int
) -> None:
    conn.execute(
        "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
        (stream, seq, type_, json.dumps(data), at),
    )


def _events(conn: sqlite3.Connection) -> None:
    """Four transcriptions: one heard, one failed, one whose client left, one still being
    heard."""
    for n, tid in enumerate(["trsc-done", "trsc-broke", "trsc-running", "trsc-left"]):
        audio = {"filename": "a.wav", "bytes": 1234, "sha256": "0" * 64, "seconds": 2.5}
        request = {"kind": "transcription", "task": "transcribe", "model": "whisper",
                   "body": {"model": "whisper-1", "stream": False}, "audio": audio,
                   "owner": "alice"}  # fmt: skip
        _append(conn, f"{tid}/request", 0, "omni.request.accepted", request, 1000 * n)
        opening = {"id": tid, "model": "whisper"}
        _append(conn, tid, 0, "transcription.in_progress", opening, 1000 * n + 1)
    _append(conn, "trsc-done", 1, "transcript.text.delta", {"delta": "Hello."}, 20)
    usage = {"type": "tokens", "input_tokens": 125, "output_tokens": 4, "total_tokens": 129}
    _append(conn, "trsc-done", 2, "transcript.text.done", {"text": "Hello.", "usage": usage}, 40)
    error = {"message": "why", "type": "server_error", "param": None, "code": "server_error"}
    _append(conn, "trsc-broke", 1, "transcription.failed", {"error": error}, 3000)
    _append(conn, "trsc-left", 1, "transcription.window", {"window": 0, "seconds": 30.0}, 3500)
    gone = {**error, "message": "The client went away.", "code": "cancelled"}
    _append(conn, "trsc-left", 2, "transcription.failed", {"error": gone, "windows": 1}, 4000)


def _log(path: Path) -> None:
    command.upgrade(alembic_config(str(path)), "head")
    with sqlite3.connect(path) as conn:
        _events(conn)


VIEW = "SELECT * FROM transcriptions ORDER BY created_ms"
SUMMARIES = "SELECT * FROM summaries ORDER BY position"


def test_each_ending_in_summaries_and_the_view(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with sqlite3.connect(path) as conn:
        view = conn.execute(
            "SELECT id, status, model, task, audio_seconds, audio_bytes, text, input_tokens,"
            " output_tokens, total_ms, error_code FROM transcriptions ORDER BY created_ms"
        ).fetchall()
    assert view == [
        ("trsc-done", "completed", "whisper", "transcribe", 2.5, 1234, "Hello.", 125, 4, 40, None),
        ("trsc-broke", "failed", "whisper", "transcribe", 2.5, 1234, None, None, None, 2000,
         "server_error"),
        ("trsc-running", "in_progress", "whisper", "transcribe", 2.5, 1234, None, None, None,
         None, None),
        ("trsc-left", "cancelled", "whisper", "transcribe", 2.5, 1234, None, None, None, 1000,
         "cancelled"),
    ]  # fmt: skip


def test_postgres_holds_the_same(tmp_path: Path, pg_url: str) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    copy(path, pg_url)
    for query in (VIEW, SUMMARIES):
        assert pg_rows(pg_url, query) == sqlite_rows(path, query)


def test_a_rebuild_folds_the_same_rows(tmp_path: Path) -> None:
    live, old = tmp_path / "live.db", tmp_path / "old.db"
    _log(live)
    cfg = alembic_config(str(old))
    command.upgrade(cfg, "0007")
    with sqlite3.connect(old) as conn:
        _events(conn)
    upgrade(str(old))
    assert sqlite_rows(old, SUMMARIES) == sqlite_rows(live, SUMMARIES)
    assert sqlite_rows(old, VIEW) == sqlite_rows(live, VIEW)


def test_omni_ls_and_show(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    listed = omni("ls", "--kind", "transcription", "--db", str(path))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()[1:]  # after the header
    assert [line.split("\t")[0] for line in lines] == ["trsc-left", "trsc-running", "trsc-broke",
                                                            "trsc-done"]  # fmt: skip
    shown = omni("show", "trsc-done", "--db", str(path))
    assert shown.returncode == 0, shown.stderr
    assert "Hello." in shown.stdout and "a.wav: 2.5 s of audio (transcribe)" in shown.stdout
