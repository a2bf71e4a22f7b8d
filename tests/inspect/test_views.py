"""The SQL views `responses`, `chat_completions` and `timeline` on a real server's log: each
row says what the API told its client."""

from __future__ import annotations

import importlib
import json
import sqlite3
from pathlib import Path

import httpx
import pytest

from omni.api.app import Settings
from omni.ports.jobs import Delta, Failed
from tests.api.test_failures import ScriptedEngine
from tests.inspect.conftest import Log
from tests.server import ServerThread

MIGRATION = importlib.import_module("omni.migrations.versions.0005_views")


def test_a_response_row_says_what_the_api_said(log: Log) -> None:
    for name, api in log.responses.items():
        (row,) = log.rows("SELECT * FROM responses WHERE id = ?", api.id)
        final = api  # what the create returned
        assert row["status"] == final.status, name
        assert row["model"] == final.model
        assert row["input_tokens"] == final.usage.input_tokens, name
        assert row["output_tokens"] == final.usage.output_tokens, name
        assert row["cached_tokens"] == final.usage.input_tokens_details.cached_tokens
        assert row["reasoning_tokens"] == final.usage.output_tokens_details.reasoning_tokens
        assert row["output_text"] == final.output_text, name
        assert row["background"] == int(bool(final.background))
        assert row["store"] == 1
        assert row["previous_response_id"] == final.previous_response_id
        assert row["deleted"] == (name == "deleted")
        assert row["created_ms"] // 1000 == final.created_at
        assert row["created"] <= row["finished"]  # ISO text sorts as time does
        assert row["created"].endswith("Z") and row["created"][10] == "T"


def test_statuses_and_reasons(log: Log) -> None:
    by_name = {
        name: log.rows("SELECT * FROM responses WHERE id = ?", api.id)[0]
        for name, api in log.responses.items()
    }
    assert by_name["cancelled"]["status"] == "cancelled"
    assert by_name["plain"]["status"] == "incomplete"
    assert by_name["plain"]["incomplete_reason"] == "max_output_tokens"
    assert by_name["background"]["background"] == 1
    assert by_name["bob"]["owner"] == "bob" and by_name["plain"]["owner"] == "alice"
    # Timings: nothing comes before its cause.
    for row in by_name.values():
        assert 0 <= row["queued_ms"] <= row["ttft_ms"] <= row["total_ms"]


def test_created_and_finished_are_the_events_times(log: Log) -> None:
    rid = log.streamed["id"]
    (row,) = log.rows(
        "SELECT created, finished, created_ms, ttft_ms FROM responses WHERE id=?", rid
    )
    times = log.rows("SELECT seq, type, time, created_ms FROM timeline WHERE stream_id = ?", rid)
    assert row["created"] == times[0]["time"]  # response.created
    assert row["finished"] == times[-1]["time"]  # its terminal event
    first = next(t for t in times if t["type"] == "response.output_item.added")
    assert row["ttft_ms"] == first["created_ms"] - row["created_ms"]


def test_the_latest_rows_come_first_by_created(log: Log) -> None:
    rows = log.rows("SELECT id FROM responses ORDER BY created DESC, created_ms DESC")
    made = [log.streamed["id"], *(r.id for r in log.responses.values())]
    assert [r["id"] for r in rows] == list(reversed(made))


def test_timeline_is_the_stream_in_seq_order(log: Log) -> None:
    rid = log.streamed["id"]
    rows = log.rows("SELECT * FROM timeline WHERE stream_id = ? ORDER BY position", rid)
    frames = [f for f in log.raw.split(b"\n\n") if f]
    assert [r["seq"] for r in rows] == list(range(len(frames)))  # position order == seq order
    assert [r["type"].encode() for r in rows] == [f.split(b"\n")[0][7:] for f in frames]
    assert rows[0]["ms_since_previous"] is None
    for before, row in zip(rows, rows[1:], strict=False):
        assert row["ms_since_previous"] == row["created_ms"] - before["created_ms"] >= 0
    text = "".join(r["text"] for r in rows if r["type"] == "response.output_text.delta")
    assert text == "".join(p["text"] for o in log.streamed["output"] for p in o["content"])
    assert all(r["text"] is None for r in rows if not r["type"].endswith(".delta"))


def test_a_chat_completion_row(log: Log) -> None:
    stored, hit = log.chats["stored"], log.chats["hit"]
    (row,) = log.rows("SELECT * FROM chat_completions WHERE id = ?", stored.id)
    assert row["object"] == "chat.completion" and row["status"] == "completed"
    assert row["finish_reason"] == stored.choices[0].finish_reason
    assert row["prompt_tokens"] == stored.usage.prompt_tokens
    assert row["completion_tokens"] == stored.usage.completion_tokens
    assert row["content"] == stored.choices[0].message.content
    assert row["stored"] == 1 and row["source"] == "generated" and row["replay_of"] is None
    (again,) = log.rows("SELECT * FROM chat_completions WHERE id = ?", hit.id)
    assert again["source"] == "cache" and again["replay_of"] == stored.id
    assert again["content"] == hit.choices[0].message.content == row["content"]


def test_a_streamed_chat_completion_and_its_chunks(log: Log) -> None:
    (row,) = log.rows("SELECT * FROM chat_completions WHERE id = ?", log.chat_id)
    chunks = [json.loads(f[6:]) for f in log.chat_raw.split(b"\n\n") if f and f != b"data: [DONE]"]
    sent = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert row["content"] == sent
    assert row["completion_tokens"] == chunks[-1]["usage"]["completion_tokens"]
    timeline = log.rows("SELECT text FROM timeline WHERE stream_id = ? ORDER BY seq", log.chat_id)
    assert "".join(t["text"] or "" for t in timeline) == sent


def test_an_unstored_completion_leaves_no_row(log: Log) -> None:
    # Its streams are purged once it was served; the purge takes its summary row too.
    assert log.rows("SELECT * FROM chat_completions WHERE id = ?", log.chats["unstored"].id) == []
    assert log.rows("SELECT * FROM summaries WHERE id = ?", log.chats["unstored"].id) == []


def test_the_triggers_made_what_the_rebuild_makes(log: Log, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    with sqlite3.connect(log.db) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    with sqlite3.connect(copy) as conn:
        kept = conn.execute("SELECT * FROM summaries ORDER BY id").fetchall()
        for statement in MIGRATION.REBUILD:
            conn.execute(statement)
        assert conn.execute("SELECT * FROM summaries ORDER BY id").fetchall() == kept
    assert len(kept) >= len(log.responses) + 3


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    engine = ScriptedEngine()
    db = tmp_path_factory.mktemp("failing") / "omni.db"
    srv = ServerThread(Settings(db_path=str(db)), engine).start()
    yield engine, srv.base_url, db
    srv.stop()


def test_a_failed_response_says_why(failing) -> None:  # type: ignore[no-untyped-def]
    engine, base, db = failing
    engine.script = [Delta("partial ", 5), Failed("generation failed: out of memory")]
    httpx.post(f"{base}/v1/responses", json={"input": "hi"}, timeout=30)
    with sqlite3.connect(db) as conn:
        rid, status, code, message, text = conn.execute(
            "SELECT id, status, error_code, error_message, output_text FROM responses"
            " WHERE status = 'failed' AND created >= date('now')"
        ).fetchone()
        api = httpx.get(f"{base}/v1/responses/{rid}").json()["status"]
    assert (status, api) == ("failed", "failed")
    assert code == "server_error" and message == "generation failed: out of memory"
    assert text == "partial "
