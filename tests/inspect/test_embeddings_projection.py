"""Migration 0006 on a log written by hand: an embeddings request's summaries row and its
`embeddings` view row, from its events alone (completed, failed, cancelled, running)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from alembic import command

from omni.db import alembic_config
from tests.test_cli import omni


def _append(
    conn: sqlite3.Connection, stream: str, seq: int, type_: str, data: dict, at: int
) -> None:
    conn.execute(
        "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
        (stream, seq, type_, json.dumps(data), at),
    )


def _request(conn: sqlite3.Connection, eid: str, at: int) -> None:
    request = {"kind": "embedding", "model": "m", "body": {"model": "alias"}, "inputs": 3,
               "prompt_tokens": 21, "owner": "alice"}  # fmt: skip
    _append(conn, f"{eid}/request", 0, "omni.request.accepted", request, at)
    _append(conn, eid, 0, "embedding.in_progress", {"id": eid}, at)


def _log(path: Path) -> None:
    """Four embeddings requests, each ended its own way (one still running)."""
    command.upgrade(alembic_config(str(path)), "head")
    with sqlite3.connect(path) as conn:
        for n, eid in enumerate(["embd-done", "embd-broke", "embd-left", "embd-running"]):
            _request(conn, eid, 1000 * n)
        timings = {"queued_at": 0, "started_at": 5}
        usage = {"prompt_tokens": 21, "total_tokens": 21}
        _append(conn, "embd-done", 1, "embedding.completed",
                {"model": "m", "usage": usage, "timings": timings}, 40)  # fmt: skip
        for eid, code in (("embd-broke", "server_error"), ("embd-left", "cancelled")):
            error = {"message": "why", "code": code}
            _append(conn, eid, 1, "embedding.failed", {"model": "m", "error": error}, 3000)


def test_each_ending_in_summaries_and_the_view(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT id, kind, status, model, input_tokens, started_at, finished_at, error_code"
            " FROM summaries ORDER BY position"
        ).fetchall()
        view = conn.execute(
            "SELECT id, status, inputs, prompt_tokens, queued_ms, total_ms FROM embeddings"
            " ORDER BY created_ms"
        ).fetchall()
    assert rows == [
        ("embd-done", "embedding", "completed", "m", 21, 5, 40, None),
        ("embd-broke", "embedding", "failed", "m", None, 1000, 3000, "server_error"),
        ("embd-left", "embedding", "cancelled", "m", None, 2000, 3000, "cancelled"),
        ("embd-running", "embedding", "in_progress", "alias", None, 3000, None, None),
    ]
    assert view[0] == ("embd-done", "completed", 3, 21, 5, 40)
    assert view[3] == ("embd-running", "in_progress", 3, None, 0, None)


def test_omni_ls_and_stats_by_kind(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with sqlite3.connect(path) as conn:  # and a chat completion, which --kind leaves out
        _append(conn, "chatcmpl-x/request", 0, "omni.request.accepted", {"kind": "chat"}, 9)
    listed = omni("ls", "--kind", "embedding", "--db", str(path))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()[1:]  # after the header
    assert [line.split("\t")[0] for line in lines] == [
        "embd-running", "embd-left", "embd-broke", "embd-done"
    ]  # fmt: skip
    assert "3 inputs, 21 tokens" in listed.stdout
    stats = omni("stats", "--json", "--db", str(path))
    assert json.loads(stats.stdout)["by_kind"] == {"embedding": 4, "chat.completion": 1}


def test_a_models_load_is_its_own_phase_in_the_timings(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with sqlite3.connect(path) as conn:  # as the service writes one that waited for its model
        request = {"kind": "embedding", "model": "m", "body": {"model": "m"}, "inputs": 1,
                   "prompt_tokens": 4, "owner": None, "load_ms": 8100}  # fmt: skip
        _append(conn, "embd-loaded/request", 0, "omni.request.accepted", request, 9000)
        _append(conn, "embd-loaded", 0, "embedding.in_progress", {"id": "embd-loaded"}, 9000)
        _append(conn, "embd-loaded", 1, "embedding.completed",
                {"model": "m", "usage": {"prompt_tokens": 4, "total_tokens": 4},
                 "timings": {"queued_at": 900, "started_at": 9000}}, 9152)  # fmt: skip
    shown = json.loads(omni("show", "embd-loaded", "--json", "--db", str(path)).stdout)
    assert shown["timings"]["load_ms"] == 8100 and shown["timings"]["total_ms"] == 152
    done = json.loads(omni("show", "embd-done", "--json", "--db", str(path)).stdout)
    assert done["timings"]["load_ms"] is None  # its model was loaded
