"""background: true at the service: the generation runs with no client attached and is
recorded exactly as a streamed response would be, every delta, with the token ids in
`<id>/tokens` (the create's answer, polling through the SDK, replays and a real engine's
run: tests/api/test_background.py)."""

from __future__ import annotations

import json
from typing import Any

from omni.ports.jobs import Delta, Failed, Finished, Output
from omni.schemas.responses import ResponseCreate
from tests.api.test_background import check_background_rows, token_ids

from .conftest import Services


async def recorded_tokens(services: Services, rid: str) -> list[int]:
    return token_ids(await services.store.read(f"{rid}/tokens"))


async def check_background_log(services: Services, rid: str, max_tokens: int) -> dict[str, Any]:
    """The log of a finished background response; returns its terminal response."""
    final = check_background_rows(await services.store.read(rid), rid, max_tokens)
    # The token ids recorded beside the deltas are exactly the generated ones.
    assert len(await recorded_tokens(services, rid)) == final["usage"]["output_tokens"]
    return final


def run_of(n: int, max_tokens: int) -> list[Output]:
    """n tokens, every third one half a character (an empty delta); cut by the limit if n
    reaches it."""
    deltas = [Delta("" if i % 3 == 2 else f"w{i} ", 100 + i) for i in range(n)]
    return [*deltas, Finished("length" if n == max_tokens else "stop", 3, n)]


async def background(services: Services, text: str, max_tokens: int) -> str:
    body = ResponseCreate(input=text, background=True, max_output_tokens=max_tokens)
    return str((await services.responses.create(body))["id"])


async def test_background_records_every_delta(services: Services) -> None:
    """No client is attached while it runs, yet every delta is in the log: the deltas of
    the log join to the final text, and the token count matches the usage."""
    services.engine.scripts.append(run_of(40, 300))
    rid = await background(services, "deltas", 300)
    final = await services.responses.wait(rid)  # what polling sees last
    logged = await check_background_log(services, rid, 300)
    deltas = [
        json.loads(e.data)["delta"]
        for e in await services.store.read(rid)
        if e.type == "response.output_text.delta"
    ]
    assert all(d != "" for d in deltas)
    output_text = final["output"][0]["content"][0]["text"]  # the SDK's output_text
    assert "".join(deltas) == output_text == logged["output"][0]["content"][0]["text"]


async def test_background_tokens_match_usage(services: Services) -> None:
    """Several background responses: each one's `<id>/tokens` holds exactly
    usage.output_tokens ids, in rows numbered from 0."""
    for n, made in zip((1, 7, 120), (1, 7, 50), strict=True):
        services.engine.scripts.append(run_of(made, n))
    ids = [await background(services, f"tokens {i}", n) for i, n in enumerate((1, 7, 120))]
    for rid, n in zip(ids, (1, 7, 120), strict=True):
        final = await services.responses.wait(rid)
        assert len(await recorded_tokens(services, rid)) == final["usage"]["output_tokens"]
        await check_background_log(services, rid, n)


def crash(message: str = "the engine process exited unexpectedly") -> Failed:
    return Failed(message, crashed=True)


async def test_a_background_response_goes_on_after_its_engine_dies(services: Services) -> None:
    """The engine dies under it (a rank of a sharded model, say): not failed, it goes on
    from its recorded tokens once the model is back, as after a restart, one stream."""
    first = run_of(12, 300)[:12]
    services.engine.scripts += [[*first, crash()], run_of(20, 300)[12:]]
    rid = await background(services, "crash", 300)
    final = await services.responses.wait(rid)
    assert final["status"] == "completed"
    logged = await check_background_log(services, rid, 300)
    assert logged["usage"]["output_tokens"] == 20
    went_on = services.engine.jobs[-1]
    assert list(went_on.resume_tokens) == [100 + i for i in range(12)]
    assert await recorded_tokens(services, rid) == [100 + i for i in range(20)]


async def test_an_engine_that_dies_each_time_ends_the_response_failed(
    services: Services,
) -> None:
    """Two continuations at most: a run that kills its engine every time ends failed."""
    services.engine.scripts += [[*run_of(3, 300)[:3], crash(f"died {i}")] for i in range(3)]
    rid = await background(services, "again and again", 300)
    final = await services.responses.wait(rid)
    assert final["status"] == "failed"
    assert final["error"]["message"] == "died 2"
    assert len(services.engine.jobs) == 3


async def test_a_foreground_response_whose_engine_dies_fails(services: Services) -> None:
    """Its client is there to be told: it ends failed at once, as before."""
    services.engine.scripts.append([*run_of(3, 300)[:3], crash()])
    body = ResponseCreate(input="fore", max_output_tokens=300)
    final = await services.responses.wait(str((await services.responses.create(body))["id"]))
    assert final["status"] == "failed"
    assert len(services.engine.jobs) == 1
