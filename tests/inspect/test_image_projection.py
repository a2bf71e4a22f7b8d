"""Migration 0010 on a log written by hand: an image generation's summaries row and its
`images` view row, from its events alone (completed, failed, cancelled, running), the same
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

IDS = ["img-done", "img-broke", "img-left", "img-running"]


def _append(
    conn: sqlite3.Connection, stream: str, seq: int, type_: str, data: dict, at: int
) -> None:
    conn.execute(
        "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
        (stream, seq, type_, json.dumps(data), at),
    )


def _log(path: Path, revision: str = "head") -> None:
    """Four image generations, each ended its own way (one still running)."""
    command.upgrade(alembic_config(str(path)), revision)
    with sqlite3.connect(path) as conn:
        for n, gid in enumerate(IDS):
            body = {"model": "gpt-image-1", "prompt": "A fox.", "n": 2, "output_format": "webp"}
            request = {"kind": "image", "model": "klein", "body": body, "size": "64x48",
                       "quality": "low", "steps": 2, "seed": 41 + n, "prompt_chars": 6,
                       "owner": "alice"}  # fmt: skip
            _append(conn, f"{gid}/request", 0, "omni.request.accepted", request, 1000 * n)
            _append(conn, gid, 0, "images.in_progress", {"id": gid}, 1000 * n)
        for i in range(2):
            made = {"id": "img-done", "index": i, "seed": 41 + i, "bytes": 600}
            _append(conn, "img-done", 1 + i, "images.image", made, 20 + i)
        usage = {"input_tokens": 9, "output_tokens": 24, "total_tokens": 33}
        done = {"model": "klein", "images": 2, "bytes": 1200, "usage": usage,
                "timings": {"queued_at": 0, "started_at": 5}}  # fmt: skip
        _append(conn, "img-done", 3, "images.completed", done, 40)
        for gid, code in (("img-broke", "server_error"), ("img-left", "cancelled")):
            error = {"message": "why", "code": code}
            _append(conn, gid, 1, "images.failed", {"model": "klein", "error": error}, 3000)


SUMMARIES = (
    "SELECT id, kind, status, model, input_tokens, output_tokens, started_at, finished_at,"
    " error_code FROM summaries ORDER BY position"
)
VIEW = "SELECT * FROM images ORDER BY created_ms, id"


def test_each_ending_in_summaries_and_the_view(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with sqlite3.connect(path) as conn:
        rows = conn.execute(SUMMARIES).fetchall()
        view = conn.execute(
            "SELECT id, status, size, quality, steps, seed, n, output_format, prompt_chars,"
            " images, bytes, input_tokens, output_tokens, queued_ms, total_ms FROM images"
            " ORDER BY created_ms"
        ).fetchall()
    assert rows == [
        ("img-done", "image", "completed", "klein", 9, 24, 5, 40, None),
        ("img-broke", "image", "failed", "klein", None, None, 1000, 3000, "server_error"),
        ("img-left", "image", "cancelled", "klein", None, None, 2000, 3000, "cancelled"),
        ("img-running", "image", "in_progress", "gpt-image-1", None, None, 3000, None, None),
    ]
    assert view[0] == (
        "img-done", "completed", "64x48", "low", 2, 41, 2, "webp", 6, 2, 1200, 9, 24, 5, 40
    )  # fmt: skip
    assert [v[1] for v in view] == ["completed", "failed", "cancelled", "in_progress"]


def test_the_rebuild_folds_a_log_written_before_the_migration(tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    _log(fresh)
    _log(old, "0009")
    command.upgrade(alembic_config(str(old)), "head")
    assert sqlite_rows(old, SUMMARIES) == sqlite_rows(fresh, SUMMARIES)
    assert sqlite_rows(old, VIEW) == sqlite_rows(fresh, VIEW)
    command.downgrade(alembic_config(str(old)), "0009")
    with sqlite3.connect(old) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "images" not in names and "summaries_on_images_end" not in names


def test_the_images_view_on_postgresql(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with database("omni_images") as url:
        upgrade(url)
        copy(path, url)
        for query in (SUMMARIES, VIEW):
            expected = sqlite_rows(path, query)
            assert len(expected) == 4 and pg_rows(url, query) == expected
