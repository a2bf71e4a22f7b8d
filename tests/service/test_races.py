"""Concurrent writers of one object's facts, on the in-memory log and on SQLite: every
metadata update lands, a delete happens once (the others are 404, as a second delete is),
and no answer carries a driver's text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest

from omni.db import upgrade
from omni.errors import NotFound
from omni.events import EventStore, MemoryStore
from omni.ports.jobs import Delta, Finished
from omni.schemas.chat import ChatCompletionCreate
from omni.schemas.responses import ResponseCreate

from .conftest import ScriptedEngine, Services, serving

UPDATES = 30
DELETES = 10
DELETED = {"object": "response.deleted", "deleted": True}


@pytest.fixture(params=["memory", "sqlite"])
async def services(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Services]:
    """The services on each log a server may run on (PostgreSQL: the contract suite)."""
    if request.param == "memory":
        async with serving(MemoryStore(), ScriptedEngine()) as served:
            yield served
        return
    upgrade(str(tmp_path / "omni.db"))
    store = EventStore(str(tmp_path / "omni.db"))
    await store.open()
    try:
        async with serving(store, ScriptedEngine()) as served:
            yield served
    finally:
        await store.close()


async def gather(*calls: Awaitable[Any]) -> list[Any]:
    """The calls at once; their results or exceptions, in order."""
    return await asyncio.gather(*calls, return_exceptions=True)


async def stored_chat(services: Services, text: str) -> str:
    services.engine.scripts.append([Delta("Hi", 10), Finished("length", 3, 1)])
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 2, "store": True}
    cid, _ = await services.completions.create_chat(ChatCompletionCreate.model_validate(body))
    await services.completions.wait(cid)
    services.completions.release(cid)
    return cid


async def facts(services: Services, object_id: str) -> list[str]:
    return [e.type for e in await services.store.read(f"{object_id}/request")]


def assert_only_404s(results: list[Any]) -> None:
    """The losers are 404s whose message names the object, never a driver or a conflict."""
    for result in results:
        assert isinstance(result, NotFound), repr(result)
        assert result.status == 404
        message = result.message
        assert "No " in message and "sqlite" not in message.lower(), message
        assert "UNIQUE" not in message and "conflict" not in message.lower(), message


async def test_concurrent_metadata_updates_all_land(services: Services) -> None:
    cid = await stored_chat(services, "update me")
    stored = services.stored
    results = await gather(
        *[stored.update(cid, {"metadata": {"n": str(i)}}) for i in range(UPDATES)]
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert failures == []
    assert sorted(r["metadata"]["n"] for r in results) == sorted(str(i) for i in range(UPDATES))
    events = await services.store.read(f"{cid}/request")
    assert [e.type for e in events] == [
        "omni.request.accepted",
        *["omni.completion.metadata_updated"] * UPDATES,
    ]
    assert [e.seq for e in events] == list(range(UPDATES + 1))
    # The completion carries the update that landed last, one of the thirty.
    last = events[-1].data
    assert (await stored.retrieve(cid))["metadata"] == {"n": last.split('"')[-2]}


async def test_concurrent_deletes_of_a_response_delete_it_once(services: Services) -> None:
    services.engine.scripts.append([Delta("Hi", 10), Finished("length", 3, 1)])
    body = ResponseCreate(input="delete me", max_output_tokens=2)
    rid = (await services.responses.create(body))["id"]
    await services.responses.wait(rid)
    services.responses.release(rid)
    results = await gather(*[services.responses.delete(rid) for _ in range(DELETES)])
    assert results.count({"id": rid, **DELETED}) == 1  # what a 200 answers
    assert_only_404s([r for r in results if isinstance(r, BaseException)])
    assert await facts(services, rid) == ["omni.request.accepted", "omni.response.deleted"]


async def test_concurrent_deletes_of_a_chat_completion_delete_it_once(services: Services) -> None:
    cid = await stored_chat(services, "delete me")
    results = await gather(*[services.stored.delete(cid) for _ in range(DELETES)])
    deleted = [r for r in results if not isinstance(r, BaseException)]
    assert [r["deleted"] for r in deleted] == [True]
    assert_only_404s([r for r in results if isinstance(r, BaseException)])
    assert await facts(services, cid) == ["omni.request.accepted", "omni.completion.deleted"]


async def test_updates_racing_a_delete_land_before_it_or_are_404(services: Services) -> None:
    cid = await stored_chat(services, "update, then delete")
    stored = services.stored
    results = await gather(
        *[stored.update(cid, {"metadata": {"n": str(i)}}) for i in range(5)],
        stored.delete(cid),
        *[stored.update(cid, {"metadata": {"n": str(i)}}) for i in range(5, 10)],
    )
    assert_only_404s([r for r in results if isinstance(r, BaseException)])
    landed = sum(not isinstance(r, BaseException) for r in results) - 1  # less the delete
    assert await facts(services, cid) == [
        "omni.request.accepted",
        *["omni.completion.metadata_updated"] * landed,
        "omni.completion.deleted",  # last: nothing lands on a deleted completion
    ]


async def test_a_cancel_racing_a_delete_writes_one_tombstone_last(services: Services) -> None:
    services.engine.scripts.append([Delta("Hi", 10)])  # goes on until cancelled
    body = ResponseCreate(input="go on", max_output_tokens=2, background=True)
    rid = (await services.responses.create(body))["id"]
    responses = services.responses
    results = await gather(*[responses.cancel(rid) for _ in range(3)], responses.delete(rid))
    assert_only_404s([r for r in results if isinstance(r, BaseException)])
    types = await facts(services, rid)
    assert types.count("omni.response.deleted") == 1
    assert types[-1] == "omni.response.deleted"  # no cancel request after the tombstone
