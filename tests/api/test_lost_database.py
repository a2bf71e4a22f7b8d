"""The database file deleted or replaced under a running server: one loud line, then every
request that needs the log is a 503 (/health too), running generations stop, and nothing is
written to whatever file now has the path."""

from __future__ import annotations

import logging
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_write_faults import DEADLINE, Reader, wait_for
from tests.faults import Dripping
from tests.server import running

MODEL = "tiny-llama"


def lose(db: Path, how: str, tmp_path: Path) -> bytes | None:
    """Delete the log, or put another SQLite file in its place; that file's bytes."""
    if how == "deleted":
        os.remove(db)
        return None
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE mine (x)")
    before = other.read_bytes()
    os.replace(other, db)
    return before


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "database_unavailable"
    assert "deleted or replaced" in error["message"] and "/" not in error["message"]


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_lost_database_refuses_new_work(
    tiny_engine: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    db = tmp_path / "omni.db"
    with running(tiny_engine, db) as (srv, _):
        http = httpx.Client(base_url=srv.base_url, timeout=DEADLINE)
        # Capped: the random-weight model seldom says its end of text (up to its context).
        small = {"model": MODEL, "input": "hi", "max_output_tokens": 2}
        created = http.post("/v1/responses", json=small)
        assert created.status_code == 200 and http.get("/health").status_code == 200
        before = lose(db, how, tmp_path)
        assert_unavailable(http.get("/health"))
        assert_unavailable(http.post("/v1/responses", json={"model": MODEL, "input": "hi"}))
        assert_unavailable(http.get(f"/v1/responses/{created.json()['id']}"))
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        assert_unavailable(http.post("/v1/chat/completions", json=chat))
        assert_unavailable(http.get("/health"))
        http.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and f"was {how}" in errors[0], errors
    if before is not None:
        assert db.read_bytes() == before  # the server stopped too: still not a byte of ours


def test_a_running_generation_stops_and_its_stream_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Dripping()
    db = tmp_path / "omni.db"
    with running(engine, db) as (_, client):
        reader = Reader(
            lambda: client.responses.create(model="scripted", input="hi", stream=True),
            lambda e: e.type == "response.output_text.delta",
        )
        reader.start()
        assert reader.deltas.wait(DEADLINE)
        os.remove(db)
        wait_for(engine.stopped.is_set, "stop of the generation")
        reader.finish()
        assert reader.error is None, reader.error
        last = reader.events[-1]
        assert last.type == "error" and last.code == "database_unavailable"
        assert last.sequence_number == reader.events[-2].sequence_number + 1
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1


def test_a_running_chat_stream_stops_with_an_error(tmp_path: Path) -> None:
    import openai

    engine = Dripping()
    db = tmp_path / "omni.db"
    with running(engine, db) as (_, client):
        reader = Reader(
            lambda: client.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "hi"}], stream=True
            ),
            lambda chunk: bool(chunk.choices and chunk.choices[0].delta.content),
        )
        reader.start()
        assert reader.deltas.wait(DEADLINE)
        os.remove(db)
        wait_for(engine.stopped.is_set, "stop of the generation")
        reader.finish()
        assert isinstance(reader.error, openai.APIError), reader.error
        assert "deleted or replaced" in reader.error.message
