"""Migration 0012 on a log written by hand: a message's (Anthropic's Messages API) summaries
row, its `messages` view row, its deltas' text in `timeline` and its replay-cache row, from
its events alone (completed with thinking, text and a tool call; failed; cancelled; running;
a replay-cache copy), the same on SQLite and on PostgreSQL (whose own triggers index the
copied events); the rebuild over a log written before the migration, and the downgrade. The
inspector reads a tool-use conversation back: its system, each block, the answer's blocks."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from alembic import command

from omni.db import alembic_config, upgrade
from omni.inspect import Inspector, open_log
from tests.inspect.test_postgres import copy, pg_rows, sqlite_rows
from tests.postgres import database

IDS = ["msg_done", "msg_broke", "msg_left", "msg_running", "msg_copy"]
WEATHER = {"city": "Paris"}
BODY: dict[str, Any] = {
    "model": "claude-local",
    "max_tokens": 64,
    "temperature": 0,
    "store": True,
    "system": [{"type": "text", "text": "You answer with tools."}],
    "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": WEATHER},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22°C, sunny"},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ],
}


def _append(
    conn: sqlite3.Connection, stream: str, seq: int, type_: str, data: dict[str, Any], at: int
) -> None:
    conn.execute(
        "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
        (stream, seq, type_, json.dumps(data), at),
    )


def _event(type_: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return type_, {"type": type_, **fields}


def _answer(mid: str) -> list[tuple[str, dict[str, Any]]]:
    """A whole message as MessageRecorder writes it: thinking, text, a tool call, the end."""
    start = {"id": mid, "type": "message", "role": "assistant", "model": "tiny", "content": [],
             "usage": {"input_tokens": 30, "output_tokens": 0}}  # fmt: skip
    usage = {"input_tokens": 20, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 10, "output_tokens": 9}  # fmt: skip
    return [
        _event("message_start", message=start),
        _event("content_block_start", index=0, content_block={"type": "thinking"}),
        _event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "Hm"}),
        _event("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s"}),
        _event("content_block_stop", index=0),
        _event("content_block_start", index=1, content_block={"type": "text", "text": ""}),
        _event("content_block_delta", index=1, delta={"type": "text_delta", "text": "Check"}),
        _event("content_block_delta", index=1, delta={"type": "text_delta", "text": "ing."}),
        _event("content_block_stop", index=1),
        _event(
            "content_block_start",
            index=2,
            content_block={"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
        ),  # fmt: skip
        _event(
            "content_block_delta",
            index=2,
            delta={"type": "input_json_delta", "partial_json": '{"city": "Paris", "day": 2}'},
        ),  # fmt: skip
        _event("content_block_stop", index=2),
        _event(
            "message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None}, usage=usage
        ),  # fmt: skip
        _event("message_stop"),
    ]


def _log(path: Path, revision: str = "head") -> None:
    """Five messages, each ended its own way (one still running, one a cache copy)."""
    command.upgrade(alembic_config(str(path)), revision)
    with sqlite3.connect(path) as conn:
        for n, mid in enumerate(IDS):
            request = {"kind": "message", "body": BODY, "key": "k1", "owner": "alice",
                       "prompt_tokens": 30, "created": n}  # fmt: skip
            if mid == "msg_copy":
                request["mirror_of"] = "msg_done"
            _append(conn, f"{mid}/request", 0, "omni.request.accepted", request, 1000 * n)
        answer = _answer("msg_done")
        for seq, (type_, data) in enumerate(answer):
            _append(conn, "msg_done", seq, type_, data, 1000 + seq * 10 if seq else 5)
        copied = [(t, json.loads(json.dumps(d).replace("msg_done", "msg_copy"))) for t, d in answer]
        for seq, (type_, data) in enumerate(copied):
            _append(conn, "msg_copy", seq, type_, data, 4100 + seq)
        failed = {"type": "error", "error": {"type": "api_error", "message": "why"}}
        for mid, at in (("msg_broke", 1000), ("msg_left", 2000), ("msg_running", 3000)):
            _append(conn, mid, 0, "message_start", {"type": "message_start"}, at)
            _append(conn, mid, 1, *_event("content_block_start", index=0), at + 7)
            text = {"type": "text_delta", "text": "Partial"}
            _append(conn, mid, 2, *_event("content_block_delta", index=0, delta=text), at + 8)
        _append(conn, "msg_broke", 3, "error", failed, 3000)
        _append(conn, "msg_left", 3, "omni.message.cancelled", {}, 3000)


SUMMARIES = (
    "SELECT id, kind, status, model, input_tokens, output_tokens, cached_tokens, started_at,"
    " first_token_at, finished_at, finish_reason, error_code, error_message, store, mirror_of"
    " FROM summaries ORDER BY position"
)
VIEW = "SELECT * FROM messages ORDER BY created_ms, id"
TIMELINE = "SELECT stream_id, seq, text FROM timeline WHERE stream_id LIKE 'msg%' ORDER BY position"
CACHE = "SELECT key, completion_id FROM chat_cache ORDER BY rowid"


def test_each_ending_in_summaries_the_view_and_the_cache(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with sqlite3.connect(path) as conn:
        rows = conn.execute(SUMMARIES).fetchall()
        view = conn.execute(
            "SELECT id, status, stop_reason, stop_sequence, input_tokens,"
            " cache_read_input_tokens, cache_creation_input_tokens, output_tokens, stored,"
            " source, replay_of, error_type, error_message, ttft_ms, total_ms, text"
            " FROM messages ORDER BY created_ms"
        ).fetchall()
        cached = conn.execute(CACHE).fetchall()
        deltas = conn.execute(
            "SELECT text FROM timeline WHERE stream_id = 'msg_done' AND type = ?",
            ("content_block_delta",),
        ).fetchall()
    done = ("message", "completed", "claude-local", 30, 9, 10, 0, 1010, 1130, "tool_use")
    assert rows[0] == ("msg_done", *done, None, None, 1, None)
    assert rows[1:4] == [
        ("msg_broke", "message", "failed", "claude-local", None, None, None,
         1000, 1007, 3000, None, "api_error", "why", 1, None),
        ("msg_left", "message", "cancelled", "claude-local", None, None, None,
         2000, 2007, 3000, None, None, None, 1, None),
        ("msg_running", "message", "in_progress", "claude-local", None, None, None,
         3000, 3007, None, None, None, None, 1, None),
    ]  # fmt: skip
    assert rows[4][:7] == ("msg_copy", "message", "completed", "claude-local", 30, 9, 10)
    assert rows[4][-1] == "msg_done"
    assert view[0] == (
        "msg_done", "completed", "tool_use", None, 20, 10, 0, 9, 1, "generated", None, None,
        None, 1010, 1130, "Checking.",
    )  # fmt: skip
    assert [v[1] for v in view] == ["completed", "failed", "cancelled", "in_progress", "completed"]
    assert view[1][11:13] == ("api_error", "why") and view[3][15] == "Partial"
    assert view[4][9:11] == ("cache", "msg_done")
    # The copy is no answer of its own: only the generated message is indexed.
    assert cached == [("k1", "msg_done")]
    assert [d[0] for d in deltas] == ["Hm", None, "Check", "ing.", '{"city": "Paris", "day": 2}']


def test_the_inspector_reads_a_tool_use_conversation(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    engine = open_log(str(path))
    try:
        with engine.connect() as conn:
            ins = Inspector(conn)
            detail = ins.detail("msg_done")
            listed = {s.id: s for s in ins.recent(kind="message")}
            stats = ins.stats()
    finally:
        engine.dispose()
    assert detail is not None
    request = detail.request
    assert request["instructions"] == "You answer with tools."
    assert request["sampling"] == {"max_tokens": 64, "temperature": 0}
    assert request["tools"] == BODY["tools"]  # whole, with its schema
    assert [(i["type"], i["role"], i["text"]) for i in request["input"]] == [
        ("message", "user", "Weather in Paris?"),
        ("message", "assistant", 'Let me look. get_weather({"city": "Paris"})'),
        ("message", "user", "22°C, sunny And tomorrow?"),
    ]
    assert request["input"][1]["parts"][1] == {
        "type": "tool_call", "name": "get_weather", "arguments": '{"city": "Paris"}',
        "call_id": "toolu_1",
    }  # fmt: skip
    assert request["input"][2]["parts"][0] == {
        "type": "tool_result", "text": "22°C, sunny", "call_id": "toolu_1", "is_error": False
    }  # fmt: skip
    assert detail.output_text == "Checking."
    assert detail.reasoning == "Hm"
    assert detail.tool_calls == [
        {"name": "get_weather", "arguments": '{"city": "Paris", "day": 2}', "call_id": "toolu_2"}
    ]
    assert detail.usage == {
        "input_tokens": 30, "output_tokens": 9, "cached_tokens": 10, "disk_cached_tokens": 0,
        "reasoning_tokens": None,
    }  # fmt: skip
    assert detail.finish_reason == "tool_use" and detail.summary.status == "completed"
    assert detail.last_seq == 13 and detail.timings["ttft_ms"] == 1010
    assert set(listed) == set(IDS)
    assert listed["msg_running"].preview == "Partial"  # its text so far
    assert listed["msg_running"].output_tokens == 1  # one delta sent
    assert listed["msg_broke"].preview == "api_error: why"
    assert listed["msg_copy"].preview == "Checking."
    assert stats.by_kind == {"message": 5}
    assert stats.input_tokens == 60 and stats.output_tokens == 18


def test_the_rebuild_folds_a_log_written_before_the_migration(tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    _log(fresh)
    _log(old, "0011")
    assert sqlite_rows(old, CACHE) == []  # nothing indexed a message then
    command.upgrade(alembic_config(str(old)), "head")
    for query in (SUMMARIES, VIEW, TIMELINE, CACHE):
        assert sqlite_rows(old, query) == sqlite_rows(fresh, query)
    command.downgrade(alembic_config(str(old)), "0011")
    with sqlite3.connect(old) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        texts = conn.execute(
            "SELECT count(text) FROM timeline WHERE type = 'content_block_delta'"
        ).fetchone()
    assert not {"messages", "chat_cache_on_message_end", "summaries_on_message_end"} & names
    assert texts == (0,)  # 0005's timeline again
    assert sqlite_rows(old, CACHE) == []
    command.upgrade(alembic_config(str(old)), "head")  # and up again
    assert sqlite_rows(old, VIEW) == sqlite_rows(fresh, VIEW)


def test_the_messages_view_and_cache_on_postgresql(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with database("omni_messages") as url:
        upgrade(url)
        copy(path, url)
        for query in (SUMMARIES, VIEW, TIMELINE, CACHE):
            expected = sqlite_rows(path, query)
            assert expected and pg_rows(url, query) == expected, query
        engine = open_log(url)
        try:
            with engine.connect() as conn:
                detail = Inspector(conn).detail("msg_done")
                running = Inspector(conn).recent(kind="message", status="in_progress")
        finally:
            engine.dispose()
        assert detail is not None and detail.output_text == "Checking."
        assert [(s.id, s.preview, s.output_tokens) for s in running] == [
            ("msg_running", "Partial", 1)
        ]
        command.downgrade(alembic_config(url), "0011")
        command.upgrade(alembic_config(url), "head")
        assert pg_rows(url, VIEW) == sqlite_rows(path, VIEW)
