"""CompletionsService on the in-memory store: a deterministic chat completion, then the same
request answered from the replay-cache index by a later process, without the engine."""

from __future__ import annotations

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
