"""CompletionsService on the in-memory store: a deterministic chat completion, then the same
request answered from the replay-cache index by a later process, without the engine."""

from __future__ import annotations

import json
from typing import Any

import pytest

from omni.events import MemoryStore
from omni.ports.chat import Capabilities, RecommendedSampling
from omni.ports.jobs import Delta, Finished, Sampling
from omni.schemas.chat import ChatCompletionCreate, CompletionCreate
from omni.service.flights import cache_key
from omni.service.stored import StoredCompletions

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
    key = json.loads((await services.store.read(f"{cid}/request"))[0].data)["key"]
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


# --- whether a completion is kept ---------------------------------------------------------

SILENT = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}  # nothing of store
ANSWER = [Delta("Hel", 10), Delta("lo", 11), Finished("stop", 3, 2)]


async def _chat(served: Services, body: dict[str, Any]) -> tuple[str, bool, dict[str, Any]]:
    """A chat completion read to its end by its client: its id, whether it was a cache hit,
    and its accepted request as the log recorded it."""
    served.engine.scripts.append(list(ANSWER))
    cid, hit = await served.completions.create_chat(ChatCompletionCreate.model_validate(body))
    await served.completions.wait(cid)
    accepted = json.loads((await served.store.read(f"{cid}/request"))[0].data)
    served.completions.release(cid)
    return cid, hit, accepted


async def _text(served: Services, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    served.engine.scripts.append(list(ANSWER))
    cid = await served.completions.create_text(CompletionCreate.model_validate(body))
    await served.completions.wait(cid)
    accepted = json.loads((await served.store.read(f"{cid}/request"))[0].data)
    served.completions.release(cid)
    return cid, accepted


async def _listed(served: Services) -> list[str]:
    stored = StoredCompletions(served.store, served.completions.appender)
    return [c["id"] for c in (await stored.list(None, {}, None, 20, "asc"))["data"]]


async def _in_log(store: MemoryStore, cid: str) -> bool:
    """Whether the completion's rows are in the log (once its server has let it go: an
    unstored one is purged when its client has read it, at the latest when the server stops)."""
    return bool(await store.read(cid)) and bool(await store.read(f"{cid}/request"))


async def test_a_chat_silent_on_store_is_kept_listed_and_replayed() -> None:
    store, engine = MemoryStore(), ScriptedEngine()
    async with serving(store, engine) as served:
        cid, hit, accepted = await _chat(served, SILENT)
        copy, again, _ = await _chat(served, SILENT)  # the identical deterministic repeat
        assert await _listed(served) == [cid, copy]
    assert accepted["body"]["store"] is True  # the log says what was decided
    assert (hit, again) == (False, True) and len(engine.jobs) == 1
    assert await _in_log(store, cid) and await _in_log(store, copy)


async def test_a_chat_with_store_false_is_purged_and_never_replayed() -> None:
    store, engine = MemoryStore(), ScriptedEngine()
    unstored = {**SILENT, "store": False}
    async with serving(store, engine) as served:
        cid, hit, accepted = await _chat(served, unstored)
        again, second, _ = await _chat(served, unstored)
        assert await _listed(served) == []
    assert accepted["body"]["store"] is False
    assert (hit, second) == (False, False) and len(engine.jobs) == 2
    assert not await _in_log(store, cid) and not await _in_log(store, again)


async def test_the_server_flag_restores_openais_default() -> None:
    store, engine = MemoryStore(), ScriptedEngine()
    async with serving(store, engine, store_by_default=False) as served:
        cid, _, accepted = await _chat(served, SILENT)
        again, hit, _ = await _chat(served, SILENT)
        asked, _, _ = await _chat(served, {**SILENT, "store": True})
        text, recorded = await _text(served, {"prompt": "hi"})
        assert await _listed(served) == [asked]
    assert accepted["body"]["store"] is False and recorded["body"]["store"] is False
    assert not hit and len(engine.jobs) == 4
    assert not await _in_log(store, cid) and not await _in_log(store, again)
    assert not await _in_log(store, text)
    assert await _in_log(store, asked)


async def test_a_legacy_completion_follows_the_same_rule() -> None:
    store = MemoryStore()
    async with serving(store, ScriptedEngine()) as served:
        silent, recorded = await _text(served, {"prompt": "hi"})
        unstored, refused = await _text(served, {"prompt": "hi", "store": False})
    assert recorded["body"]["store"] is True and refused["body"]["store"] is False
    assert await _in_log(store, silent)
    assert not await _in_log(store, unstored)


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


# --- deterministic is what the request runs with --------------------------------------------


def test_the_cache_key_follows_the_sampling_a_request_runs_with() -> None:
    """No temperature in the body: deterministic where the model (or the operator) makes it
    greedy, not where it samples; and the key changes with the sampling it runs with."""
    body = ChatCompletionCreate.model_validate({**BODY, "temperature": None})
    greedy, sampled = Sampling(temperature=0.0), Sampling(temperature=1.0)
    assert cache_key("scripted", body, sampled) is None
    assert cache_key("scripted", body, greedy) is not None
    assert cache_key("scripted", body, Sampling(temperature=1.0, seed=7)) is not None
    assert cache_key("scripted", body, greedy) != cache_key(
        "scripted", body, Sampling(temperature=0.0, top_k=5)
    )


async def test_a_chat_on_a_model_that_decodes_greedily_is_answered_from_the_cache() -> None:
    """A model whose generation_config asks for greedy decoding answers a request that sets
    no temperature deterministically: its repeat is a replay, not a second generation."""
    store = MemoryStore()
    body = ChatCompletionCreate.model_validate({**BODY, "temperature": None})
    greedy = Capabilities(1024, 16, sampling=RecommendedSampling(temperature=0.0))
    first, later = ScriptedEngine(), ScriptedEngine()
    first.capabilities = later.capabilities = greedy
    first.scripts.append([Delta("Hel", 10), Delta("lo", 11), Finished("stop", 3, 2)])
    async with serving(store, first) as served:
        cid, hit = await served.completions.create_chat(body)
        await served.completions.wait(cid)
        served.completions.release(cid)
    async with serving(store, later) as again:
        copy, replayed = await again.completions.create_chat(body)
        await again.completions.wait(copy)
        again.completions.release(copy)
    assert (hit, replayed) == (False, True)
    assert later.jobs == []


@pytest.mark.parametrize(
    ("tool_choice", "content"), [("auto", '{"answer": "Par'), ("required", None)]
)
async def test_cut_json_is_the_answer_unless_a_call_is_forced(
    services: Services, tool_choice: str, content: str | None
) -> None:
    """Plain JSON calls, the limit reached before the object named any tool. Under tool_choice
    auto the model may answer in JSON: its text comes back. Under required the grammar forces
    a call: the unfinished one is dropped. The finish reason is length."""
    services.engine.scripts.append(
        [Delta('{"answer": ', 10), Delta('"Par', 11), Finished("length", 3, 2)]
    )
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    body = ChatCompletionCreate.model_validate(
        {**BODY, "tools": tools, "tool_choice": tool_choice, "max_tokens": 2}
    )
    cid, _ = await services.completions.create_chat(body)
    events = await services.completions.wait(cid)
    services.completions.release(cid)
    (choice,) = services.completions.fold("chat", events)["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == content
    assert not choice["message"].get("tool_calls")
