"""Cancelling a background response at the service (the HTTP route, the SDK and a real
engine's cancel of a running response: tests/api/test_cancel.py)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

from omni.events import MemoryStore
from omni.ports.jobs import Delta, Finished
from omni.schemas.responses import ResponseCreate
from omni.vocabulary import CANCEL_REQUESTED

from .conftest import OneAtATime, Services, serving

LONG_RUN = {"input": "go on and on", "temperature": 0.0, "max_output_tokens": 4000}
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


@pytest.fixture
async def served() -> AsyncIterator[Services]:
    """The services over an engine that decodes one job at a time."""
    async with serving(MemoryStore(), OneAtATime()) as services:
        yield services


async def facts(services: Services, rid: str) -> list[str]:
    return [e.type for e in await services.store.read(f"{rid}/request")]


async def recorded_tokens(services: Services, rid: str) -> list[int]:
    return [t for r in await services.store.read(f"{rid}/tokens") for t in json.loads(r.data)]


async def is_finished(services: Services, rid: str) -> bool:
    rows = await services.store.read(rid)
    return bool(rows) and rows[-1].type in TERMINAL


async def start_long(services: Services) -> str:
    """A background run that goes on until it is cancelled (when the engine reaches it)."""
    body = ResponseCreate.model_validate({**LONG_RUN, "background": True})
    return str((await services.responses.create(body))["id"])


async def first_delta(services: Services, rid: str) -> None:
    """Until the run's first token is in the log."""
    async with aclosing(services.responses.events(rid)) as events:
        async for event in events:
            if event is not None and event.type == "response.output_text.delta":
                return


async def test_cancel_queued(served: Services) -> None:
    """The engine is busy, so the second response waits in the queue; cancelling it ends it
    at once: cancelled, no output, no output tokens, never in progress, never run."""
    responses, engine = served.responses, served.engine
    assert isinstance(engine, OneAtATime)
    generations = engine.generations
    engine.scripts.append([Delta("on", 10)])  # the busy one's; the queued one never takes one
    busy = await start_long(served)
    await first_delta(served, busy)
    queued = await start_long(served)
    assert engine.queued == 1  # the engine holds it: it waits however long the test takes
    assert (await responses.retrieve(queued))["status"] == "queued"

    start = time.monotonic()
    cancelled = await responses.cancel(queued)
    assert time.monotonic() - start < 5.0  # not once `busy` ends (it runs until cancelled)
    assert cancelled["status"] == "cancelled"
    assert cancelled["usage"]["output_tokens"] == 0
    assert not await is_finished(served, busy), "the busy response must still run"

    rows = await served.store.read(queued)
    types = [e.type for e in rows]
    assert "response.in_progress" not in types, types
    assert types[:2] == ["response.created", "response.queued"]
    assert types[-1] == "response.incomplete"
    assert json.loads(rows[-1].data)["response"]["status"] == "cancelled"
    assert CANCEL_REQUESTED in await facts(served, queued)
    assert await recorded_tokens(served, queued) == []
    # Now the busy one too; the queued job, once the engine reaches it, is skipped.
    busy_final = await responses.cancel(busy)
    assert busy_final["status"] == "cancelled"
    engine.scripts.append([Delta("Hi", 11), Finished("length", 3, 1)])
    after = await create(served, input="next", max_output_tokens=3)
    assert after["status"] in ("completed", "incomplete")
    assert engine.generations == generations + 2  # busy + after, not queued
    assert [e.type for e in await served.store.read(queued)] == types  # unchanged
    assert await responses.cancel(queued) == cancelled

    # Nothing was generated, so there is no output (not even an empty message item).
    assert cancelled["output"] == [], cancelled["output"]
    assert types == ["response.created", "response.queued", "response.incomplete"], types


async def create(services: Services, **body: Any) -> dict[str, Any]:
    """A foreground response read to its end: the final one."""
    rid = (await services.responses.create(ResponseCreate.model_validate(body)))["id"]
    try:
        return await services.responses.wait(rid)
    finally:
        services.responses.release(rid)
