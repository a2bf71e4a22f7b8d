"""omni.inspect.Inspector on a real server's log, read while the server runs: through the
CLI's read-only engine, and through an async engine's run_sync as the server reads."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Connection

from omni.events.sqlite.connections import sqlite_url
from omni.inspect import Inspector, open_log
from omni.inspect.folding import preview
from tests.inspect.conftest import Log


@pytest.fixture
def ins(log: Log) -> Iterator[Inspector]:
    engine = open_log(str(log.db))
    with engine.connect() as conn:
        yield Inspector(conn)
    engine.dispose()


def test_recent_is_newest_first_and_says_what_the_api_said(log: Log, ins: Inspector) -> None:
    recent = ins.recent(limit=100)
    assert [s.position for s in recent] == sorted((s.position for s in recent), reverse=True)
    by_id = {s.id: s for s in recent}
    for name, api in log.responses.items():
        s = by_id[api.id]
        assert s.kind == "response" and s.status == api.status, name
        assert (s.input_tokens, s.output_tokens) == (
            api.usage.input_tokens,
            api.usage.output_tokens,
        )
        assert s.preview == preview(api.output_text) or not api.output_text.strip()
        assert s.ttft_ms is not None and s.ttft_ms >= 0
        assert s.deleted == (name == "deleted")
        assert s.created_ms // 1000 == api.created_at
    hit = by_id[log.chats["hit"].id]
    assert hit.kind == "chat.completion" and hit.status == "completed"
    assert hit.output_tokens == log.chats["hit"].usage.completion_tokens
    assert log.chats["unstored"].id not in by_id  # purged once its client read it
    assert by_id[log.responses["bob"].id].owner == "bob"


def test_recent_filters_and_pages(log: Log, ins: Inspector) -> None:
    everything = ins.recent(limit=100)
    pages, before = [], None
    while page := ins.recent(limit=3, before_position=before):
        pages += page
        before = page[-1].position
    assert [s.id for s in pages] == [s.id for s in everything]
    assert [s.id for s in ins.recent(owner="bob")] == [log.responses["bob"].id]
    assert [s.id for s in ins.recent(status="cancelled")] == [log.responses["cancelled"].id]
    assert {s.kind for s in ins.recent(kind="chat.completion")} == {"chat.completion"}
    assert ins.recent(model="no-such-model") == []
    newest = everything[0].created_ms
    assert [s.id for s in ins.recent(since_ms=newest)] == [
        s.id for s in everything if s.created_ms >= newest
    ]


def test_detail_of_a_response(log: Log, ins: Inspector) -> None:
    api = log.responses["chained"]
    d = ins.detail(api.id)
    assert d is not None
    assert d.summary.id == api.id and d.output_text == api.output_text
    assert d.request["instructions"] == "Be brief."
    assert d.request["sampling"]["temperature"] == 0.5
    said = {"type": "text", "text": "And then?"}
    assert d.request["input"] == [
        {"type": "message", "role": "user", "text": "And then?", "parts": [said]}
    ]
    assert d.usage["input_tokens"] == api.usage.input_tokens
    assert d.usage["cached_tokens"] == api.usage.input_tokens_details.cached_tokens
    assert d.previous_response_id == log.responses["plain"].id
    assert d.error is None and d.finish_reason == "max_output_tokens"
    t = d.timings
    assert 0 <= t["queued_ms"] <= t["ttft_ms"] <= t["total_ms"]
    streamed = ins.detail(log.streamed["id"])
    assert streamed is not None
    frames = [f for f in log.raw.split(b"\n\n") if f]
    assert streamed.last_seq == len(frames) - 1
    assert json.loads(json.dumps(d.to_json()))["summary"]["id"] == api.id


def test_detail_of_a_completion_served_from_the_cache(log: Log, ins: Inspector) -> None:
    hit, stored = log.chats["hit"], log.chats["stored"]
    d = ins.detail(hit.id)
    assert d is not None
    assert d.replay_of == stored.id and d.output_text == hit.choices[0].message.content
    said = {"type": "text", "text": "same"}
    assert d.request["input"] == [
        {"type": "message", "role": "user", "text": "same", "parts": [said]}
    ]
    assert d.request["sampling"]["temperature"] == 0
    assert d.finish_reason == hit.choices[0].finish_reason


def test_owners_do_not_see_each_other(log: Log, ins: Inspector) -> None:
    bobs = log.responses["bob"].id
    assert ins.detail(bobs, owner="alice") is None
    assert ins.timeline(bobs, owner="alice") == []
    assert ins.detail(bobs, owner="bob") is not None
    assert ins.detail("resp_nope") is None and ins.timeline("resp_nope") == []


def test_timeline_after_a_seq(log: Log, ins: Inspector) -> None:
    rid = log.streamed["id"]
    rows = ins.timeline(rid)
    frames = [f for f in log.raw.split(b"\n\n") if f]
    assert [r.seq for r in rows] == list(range(len(frames)))
    assert [f"event: {r.type}".encode() for r in rows] == [f.split(b"\n")[0] for f in frames]
    assert [r.seq for r in ins.timeline(rid, after_seq=5)] == list(range(6, len(frames)))
    assert ins.timeline(rid, after_seq=rows[-1].seq) == []
    assert rows[3].to_json()["type"] == rows[3].type


def test_stats(log: Log, ins: Inspector) -> None:
    st = ins.stats()
    summaries = ins.recent(limit=100)
    assert st.total == len(summaries)
    assert st.by_status["cancelled"] == 1
    assert st.output_tokens == sum(s.output_tokens or 0 for s in summaries)
    assert st.by_kind["response"] == sum(s.kind == "response" for s in summaries)
    assert st.ttft_ms_p50 is not None and st.ttft_ms_p95 is not None
    assert st.ttft_ms_p50 <= st.ttft_ms_p95
    assert ins.stats(owner="bob").total == 1
    assert ins.stats(since_ms=summaries[0].created_ms + 1).total == 0
    assert json.loads(json.dumps(st.to_json()))["total"] == st.total


def test_the_server_side_reads_the_same_through_run_sync(log: Log, ins: Inspector) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    async def read() -> list[str]:
        engine = create_async_engine(sqlite_url(str(log.db)))
        try:
            async with engine.connect() as conn:

                def recent(c: Connection) -> list[str]:
                    return [s.id for s in Inspector(c).recent(owner="alice")]

                return await conn.run_sync(recent)
        finally:
            await engine.dispose()

    assert asyncio.run(read()) == [s.id for s in ins.recent(owner="alice")]
