"""A message (Anthropic's Messages API) a crash left open is ended at the next start with
Anthropic's `error` event, after what its client was sent; once. Its log is made by the
service itself on a scripted engine and cut where a crash cuts it (after a text delta), then
given to a restarted server: on the in-memory log, and on SQLite, whose projection then says
it failed and why."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from omni.events import Append, EventStore, MemoryStore, NewEvent, StoredEvent
from omni.ports.jobs import Delta
from omni.schemas.messages import MessageCreate
from omni.service.messages import RESTARTED, MessagesService
from tests.service.conftest import ScriptedEngine, Services, serving

BODY = MessageCreate.model_validate(
    {"model": "scripted", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
)


def _messages(served: Services) -> MessagesService:
    return MessagesService(served.completions, served.responses.sealer)


async def _cut() -> tuple[str, list[StoredEvent]]:
    """A message's request and stream as a crash leaves them: its text's first two deltas
    committed, no ending."""
    store, engine = MemoryStore(), ScriptedEngine()
    engine.scripts.append([Delta("Hel", 5), Delta("lo", 6)])  # no end: it runs on
    async with serving(store, engine) as served:
        messages = _messages(served)
        mid, hit = await messages.create(BODY)
        assert not hit
        seen = ""
        async with aclosing(messages.events(mid)) as events:
            async for event in events:
                if event is not None and event.type == "content_block_delta":
                    seen += json.loads(event.data)["delta"]["text"]
                    if seen == "Hello":
                        break
        rows = [*await store.read(f"{mid}/request"), *await store.read(mid)]
        messages.cancel_running(mid)
        await messages.close()
    return mid, rows


async def _restarted(store: Any, rows: list[StoredEvent]) -> None:
    for stream in dict.fromkeys(r.stream_id for r in rows):
        own = [NewEvent(r.type, r.data) for r in rows if r.stream_id == stream]
        await store.append([Append(stream, 0, own)])


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_a_message_left_open_ends_with_an_error_event_once(
    backend: str, migrated: Path, tmp_path: Path
) -> None:
    mid, rows = await _cut()
    assert [r.type for r in rows if r.stream_id == mid] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta",
    ]  # fmt: skip
    path = tmp_path / "omni.db"
    if backend == "sqlite":
        shutil.copyfile(migrated, path)
    store = EventStore(str(path)) if backend == "sqlite" else MemoryStore()
    await store.open()
    try:
        await _restarted(store, rows)
        # (serving() is typed for the memory store; the SQLite one serves as `logged`'s does)
        async with serving(store, ScriptedEngine()) as served:  # type: ignore[arg-type]
            messages = _messages(served)
            assert await messages.recover() == 1
            ended = await store.read(mid)
            assert [(e.type, e.data) for e in ended[:-1]] == [
                (r.type, r.data) for r in rows if r.stream_id == mid
            ]
            error = {"type": "error", "error": {"type": "api_error", "message": RESTARTED}}
            assert (ended[-1].type, json.loads(ended[-1].data)) == ("error", error)
            folded = await messages.retrieve(mid)
            assert folded["content"] == [{"type": "text", "text": "Hello"}]
            assert await messages.recover() == 0  # ended: never again
            assert len(await store.read(mid)) == len(ended)
    finally:
        await store.close()
    if backend == "sqlite":
        with sqlite3.connect(path) as conn:
            row = conn.execute(
                "SELECT status, error_type, error_message FROM messages WHERE id = ?", (mid,)
            ).fetchone()
        assert row == ("failed", "api_error", RESTARTED)
