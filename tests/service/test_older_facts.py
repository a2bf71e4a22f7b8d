"""A log whose accepted requests say nothing of `store` (tests/older_facts.py): the start-up
purge leaves them, recovery ends the running response, and every reader takes them as kept."""

from __future__ import annotations

import json

from omni.events import MemoryStore
from omni.service.leftovers import purge_unstored
from omni.service.stored import StoredCompletions
from tests.older_facts import CHAT, FINISHED, RUNNING, appends

from .conftest import ScriptedEngine, serving


async def test_a_server_starts_on_facts_without_store_and_keeps_them() -> None:
    store = MemoryStore()
    await store.append(appends())
    assert await purge_unstored(store) == 0  # nothing said it must not be kept
    async with serving(store, ScriptedEngine()) as served:  # recovery reads every one
        ended = await served.store.last(RUNNING)
        assert ended is not None and ended.type == "response.failed"
        assert (await served.responses.retrieve(RUNNING))["status"] == "failed"
        assert (await served.responses.retrieve(FINISHED))["status"] == "completed"
        stored = StoredCompletions(store, served.completions.appender)
        assert (await stored.retrieve(CHAT))["choices"][0]["message"]["content"] == "hello"
        listed = await stored.list(None, {}, None, 20, "asc")
        assert [c["id"] for c in listed["data"]] == [CHAT]
    first = json.loads((await store.read(f"{RUNNING}/request"))[0].data)
    assert "store" not in first["body"]  # read as it was written, never rewritten
