"""CompletionsService on the in-memory store: a deterministic chat completion, then the same
request answered from the replay-cache index by a later process, without the engine."""

from __future__ import annotations

import json

from omni.jobs import Delta, Finished
from omni.schemas.chat import ChatCompletionCreate
from omni.service.completions import cache_key

from .conftest import ScriptedEngine, Services, serving

BODY = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "store": True}


async def test_a_chat_completion_is_replayed_from_the_cache_index(services: Services) -> None:
    body = ChatCompletionCreate.model_validate(BODY)
    services.engine.scripts.append([Delta("Hel", 10), Delta("lo", 11), Finished("stop", 3, 2)])
    cid, hit = await services.completions.create_chat(body)
    first = services.completions.fold("chat", await services.completions.wait(cid))
    services.completions.release(cid)
    assert not hit
    assert first["choices"][0]["message"]["content"] == "Hello"
    key = cache_key("scripted", body)
    assert key is not None and await services.store.cache.lookup(key) == cid

    later = ScriptedEngine()  # a later process over the same log: nothing in flight
    async with serving(services.store, later) as again:
        copy, hit = await again.completions.create_chat(body)
        replayed = again.completions.fold("chat", await again.completions.wait(copy))
        again.completions.release(copy)
    assert hit and copy != cid
    assert later.jobs == []
    assert replayed["id"] == copy
    assert replayed["choices"] == first["choices"]
    assert replayed["usage"] == first["usage"]


async def test_a_forced_call_cut_by_the_limit_keeps_its_complete_calls(services: Services) -> None:
    """tool_choice required, the output limit reached in the second call of a list: the first
    is a tool call, the second is not turned into text, and the finish reason is length. The
    stream opens with a null content, as a call may come."""
    first = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
    services.engine.scripts.append(
        [Delta(f"[{first}, ", 10), Delta('{"name": "get_ti', 11), Finished("length", 3, 2)]
    )
    tools = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
        for name in ("get_weather", "get_time")
    ]
    body = ChatCompletionCreate.model_validate(
        {**BODY, "tools": tools, "tool_choice": "required", "max_tokens": 2}
    )
    cid, _ = await services.completions.create_chat(body)
    events = await services.completions.wait(cid)
    services.completions.release(cid)
    assert json.loads(events[0].data)["choices"][0]["delta"] == {
        "role": "assistant",
        "content": None,
    }
    (choice,) = services.completions.fold("chat", events)["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] is None
    assert [
        (c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]
    ] == [("get_weather", '{"city": "Paris"}')]
