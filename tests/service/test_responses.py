"""ResponsesService on the in-memory store: a response created, followed, read back, cancelled."""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import pytest

from omni.errors import InvalidRequest, NotFound
from omni.ports.jobs import Delta, Finished
from omni.schemas.responses import ResponseCreate
from omni.vocabulary import ACCEPTED, CANCEL_REQUESTED

from .conftest import Services


async def test_a_response_is_streamed_completed_and_read_back(services: Services) -> None:
    responses = services.responses
    services.engine.scripts.append([Delta("Hel", 10), Delta("lo", 11), Finished("stop", 3, 2)])
    created = await responses.create(ResponseCreate(input="hi", stream=True))
    rid = created["id"]
    events = [e async for e in responses.events(rid) if e is not None]
    responses.release(rid)
    data = [json.loads(e.data) for e in events]
    assert [d["sequence_number"] for d in data] == list(range(len(events)))
    assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.completed"
    assert "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta") == "Hello"
    final = await responses.retrieve(rid)
    assert final == data[-1]["response"]
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "Hello"
    request, facts = await responses.accepted(rid)
    assert [i["content"][0]["text"] for i in request["input"]] == ["hi"] and facts == []
    items = await responses.stored_items(rid, None)  # what a follow-up request carries on
    assert [(i["role"], i["content"][0]["text"]) for i in items] == [
        ("user", "hi"),
        ("assistant", "Hello"),
    ]
    assert [e.type for e in await services.store.read(f"{rid}/request")] == [ACCEPTED]
    # Purged between its request's read and its events' (retention): not found, not {}.
    await services.store.purge([rid])
    with pytest.raises(NotFound):
        await responses.retrieve(rid)


async def test_a_background_response_is_cancelled_mid_way(services: Services) -> None:
    responses = services.responses
    services.engine.scripts.append([Delta("Hel", 10)])  # then waits for the cancel
    created = await responses.create(ResponseCreate(input="hi", background=True))
    rid = created["id"]
    async with aclosing(responses.events(rid)) as events:
        async for event in events:  # the first token is recorded: the engine holds the job
            if event is not None and event.type == "response.output_text.delta":
                break
    cancelled = await responses.cancel(rid)
    assert cancelled["status"] == "cancelled"
    assert (await responses.retrieve(rid))["status"] == "cancelled"
    assert services.engine.jobs[0].stop.is_set()
    assert [e.type for e in await services.store.read(f"{rid}/request")] == [
        ACCEPTED,
        CANCEL_REQUESTED,
    ]
    assert await responses.cancel(rid) == cancelled  # a finished one comes back unchanged


async def test_a_forced_call_cut_by_the_limit_keeps_its_complete_calls(services: Services) -> None:
    """tool_choice required, the output limit reached in the second call of a list: the first
    is a function_call item, the second is not turned into text, the response is incomplete."""
    responses = services.responses
    first = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
    services.engine.scripts.append(
        [Delta(f"[{first}, ", 10), Delta('{"name": "get_ti', 11), Finished("length", 3, 2)]
    )
    tools: Any = [
        {"type": "function", "name": name, "parameters": {"type": "object"}}
        for name in ("get_weather", "get_time")
    ]
    body = ResponseCreate(input="hi", tools=tools, tool_choice="required", stream=True)
    rid = (await responses.create(body))["id"]
    events = [e async for e in responses.events(rid) if e is not None]
    responses.release(rid)
    final = await responses.retrieve(rid)
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [(i["type"], i["name"], i["arguments"]) for i in final["output"]] == [
        ("function_call", "get_weather", '{"city": "Paris"}')
    ]
    assert events[-1].type == "response.incomplete"
    assert not [e for e in events if e.type == "response.output_text.delta"]


async def test_a_json_answer_cut_by_the_limit_is_its_text(services: Services) -> None:
    """tool_choice auto with plain JSON calls: the model answered in JSON and the limit cut it
    before it named any tool. The answer is the incomplete response's message."""
    responses = services.responses
    services.engine.scripts.append(
        [Delta('```json\n{"summary": ', 10), Delta('"The', 11), Finished("length", 3, 2)]
    )
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    rid = (await responses.create(ResponseCreate(input="hi", tools=tools, stream=True)))["id"]
    events = [e async for e in responses.events(rid) if e is not None]
    responses.release(rid)
    final = await responses.retrieve(rid)
    assert events[-1].type == "response.incomplete"
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [item["type"] for item in final["output"]] == ["message"]
    assert final["output"][0]["content"][0]["text"] == '```json\n{"summary": "The'


async def test_a_warm_up_is_checked_and_complete_with_nothing_run(services: Services) -> None:
    """generate: false (a WebSocket's warm-up): a response complete at once with no output,
    the engine never asked, the log untouched; the request checked as a create is."""
    responses = services.responses
    body = ResponseCreate(input="hi", instructions="be brief", tools=[], store=False)
    warm = await responses.warm_up(body)
    assert warm["id"].startswith("resp_") and warm["model"] == "scripted"
    assert (warm["status"], warm["output"], warm["instructions"]) == ("completed", [], "be brief")
    assert warm["usage"]["input_tokens"] == warm["usage"]["output_tokens"] == 0
    assert warm["completed_at"] == warm["created_at"]
    assert services.engine.jobs == [] and await services.store.read(warm["id"]) == []
    gone = ResponseCreate(input="hi", previous_response_id="resp_gone")
    with pytest.raises(InvalidRequest) as refused:
        await responses.warm_up(gone)
    assert refused.value.code == "previous_response_not_found"
