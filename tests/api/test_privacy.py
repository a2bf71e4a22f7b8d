"""What a client asked not to store leaves the log, the file and the replay cache; what a client
deleted leaves the replay cache. Against a real server, its SQLite file read byte by byte."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.api._helpers import MODEL, wait_for
from tests.server import ServerThread, running

# How long a purge and the checkpoint after it may take before a test calls the bytes stuck.
DEADLINE = 30.0


@pytest.fixture
def live(tiny_engine: Any, tmp_path: Path) -> Iterator[tuple[ServerThread, OpenAI]]:
    with running(tiny_engine, tmp_path / "omni.db") as pair:
        yield pair


def marker() -> str:
    return f"privacy-marker-{uuid.uuid4().hex}"


def on_disk(srv: ServerThread, text: str) -> list[str]:
    """The files of the log (the database and its WAL) whose raw bytes hold `text`."""
    db = Path(srv.state.store.path)
    needle = text.encode()
    return [
        p.name
        for p in (db, db.with_name(db.name + "-wal"))
        if p.exists() and needle in p.read_bytes()
    ]


def rows_of(srv: ServerThread, object_id: str) -> int:
    """Rows of the object's streams, read on a connection of the test's own (closed at once,
    so it never keeps the server's checkpoint waiting)."""
    conn = sqlite3.connect(f"file:{srv.state.store.path}?mode=ro", uri=True)
    try:
        sql = "SELECT count(*) FROM events WHERE stream_id = ? OR stream_id LIKE ?"
        return int(conn.execute(sql, (object_id, f"{object_id}/%")).fetchone()[0])
    finally:
        conn.close()


def cache_rows(srv: ServerThread) -> list[tuple[str, str]]:
    conn = sqlite3.connect(f"file:{srv.state.store.path}?mode=ro", uri=True)
    try:
        return list(conn.execute("SELECT key, completion_id FROM chat_cache"))
    finally:
        conn.close()


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 4,
        "temperature": 0,
        **extra,
    }


def test_unstored_requests_leave_the_log_the_file_and_the_wal(
    live: tuple[ServerThread, OpenAI],
) -> None:
    """Chat with store false, plain and streamed, a legacy completion with store false and
    Responses with store false, plain and streamed: once answered, their rows are purged and
    their prompt is in neither the database file nor its WAL."""
    srv, client = live
    marks = {name: marker() for name in ("chat", "stream", "legacy", "resp", "resp-stream")}
    ids = []
    done = client.chat.completions.create(**chat(marks["chat"], store=False))
    assert done.choices[0].finish_reason in ("stop", "length")
    ids.append(done.id)
    chunks = list(client.chat.completions.create(**chat(marks["stream"], store=False), stream=True))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    ids.append(chunks[0].id)
    legacy = client.completions.create(
        model=MODEL, prompt=marks["legacy"], max_tokens=3, extra_body={"store": False}
    )
    ids.append(legacy.id)
    resp = client.responses.create(
        model=MODEL, input=marks["resp"], store=False, max_output_tokens=3
    )
    assert resp.status in ("completed", "incomplete")
    ids.append(resp.id)
    events = list(
        client.responses.create(
            model=MODEL, input=marks["resp-stream"], store=False, max_output_tokens=3, stream=True
        )
    )
    ids.append(events[-1].response.id)  # type: ignore[union-attr]
    stored = client.chat.completions.create(**chat(marker(), store=True))  # a witness: kept

    assert wait_for(lambda: not any(rows_of(srv, i) for i in ids), DEADLINE), [
        (i, rows_of(srv, i)) for i in ids
    ]
    assert wait_for(lambda: not any(on_disk(srv, m) for m in marks.values()), DEADLINE), {
        name: on_disk(srv, m) for name, m in marks.items()
    }
    assert rows_of(srv, stored.id) > 0
    assert client.chat.completions.retrieve(stored.id).id == stored.id


def test_the_replay_cache_keeps_nothing_unstored(live: tuple[ServerThread, OpenAI]) -> None:
    """A deterministic request sent again is answered from the cache only if the first was
    stored: a store:false answer is not kept to replay (a store-less one is kept)."""
    srv, _ = live
    engine = srv.state.engine
    with httpx.Client(base_url=srv.base_url, timeout=30) as http:
        body = chat("replay me, unstored", store=False)
        made = engine.generations
        first = http.post("/v1/chat/completions", json=body)
        again = http.post("/v1/chat/completions", json=body)
        assert [first.status_code, again.status_code] == [200, 200]
        assert [first.headers["x-omni-cache"], again.headers["x-omni-cache"]] == ["miss"] * 2
        assert engine.generations == made + 2  # generated twice: nothing was replayed
        assert cache_rows(srv) == []
        firsts = []
        for stored in (chat("replay me, stored", store=True), chat("replay me, by default")):
            firsts.append(http.post("/v1/chat/completions", json=stored).json()["id"])
            hit = http.post("/v1/chat/completions", json=stored)
            assert hit.headers["x-omni-cache"] == "hit"
        assert sorted(c for _, c in cache_rows(srv)) == sorted(firsts)


def test_a_deleted_completion_is_never_replayed(live: tuple[ServerThread, OpenAI]) -> None:
    srv, client = live
    engine = srv.state.engine
    body = chat("delete me, then ask again", store=True)
    first = client.chat.completions.create(**body)
    assert [c for _, c in cache_rows(srv)] == [first.id]
    assert client.chat.completions.delete(first.id).deleted
    assert cache_rows(srv) == []  # gone in the tombstone's own transaction
    made = engine.generations
    raw = client.chat.completions.with_raw_response.create(**body)
    again = raw.parse()
    assert raw.headers["x-omni-cache"] == "miss"
    assert engine.generations == made + 1
    assert again.id != first.id
    assert [c for _, c in cache_rows(srv)] == [again.id]
