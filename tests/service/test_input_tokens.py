"""responses.input_tokens.count at the service level: the count is the prompt a create with the
same body prefills (instructions, tools, the chain, the conversation), and nothing is written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from omni.errors import InvalidRequest, NotFound
from omni.events import MemoryStore
from omni.ports.jobs import Delta, Finished
from omni.schemas.conversations import ConversationCreate
from omni.schemas.responses import ResponseCreate
from omni.vocabulary import ACCEPTED

from .conftest import ScriptedEngine, Services, serving

TOOL: Any = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


class WordEngine(ScriptedEngine):
    """A prompt of one token per word of every message and tool: a count that moves with
    everything a request puts in the prompt."""

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        thinking: bool | None = None,
    ) -> list[int]:
        words = " ".join(str(m.get("content")) for m in messages).split()
        return list(range(len(words) + 2 * len(messages) + 7 * len(tools)))


@pytest.fixture
async def counted() -> AsyncIterator[Services]:
    async with serving(MemoryStore(), WordEngine()) as served:
        yield served


async def created_prompt(services: Services, body: ResponseCreate) -> int:
    """The prompt's length of the job a create with `body` submitted."""
    services.engine.scripts.append([Delta("ok", 5), Finished("stop", 0, 1)])
    rid = (await services.responses.create(body))["id"]
    await services.responses.wait(rid)
    services.responses.release(rid)
    return len(services.engine.jobs[-1].prompt)


async def test_the_count_is_the_prompt_a_create_prefills(counted: Services) -> None:
    responses = counted.responses
    bodies = [
        ResponseCreate(input="what is the weather like today"),
        ResponseCreate(input="hi there", instructions="Answer in French, briefly."),
        ResponseCreate(input="weather in Paris?", tools=[TOOL]),
        ResponseCreate(input="weather in Paris?", tools=[TOOL], tool_choice="none"),
    ]
    counts = [await responses.count_input_tokens(body) for body in bodies]
    assert counts == [await created_prompt(counted, body) for body in bodies]
    assert len(set(counts)) == len(counts)  # each part of a request counts


async def test_a_chain_and_a_conversation_count_their_earlier_items(counted: Services) -> None:
    responses = counted.responses
    await created_prompt(counted, ResponseCreate(input="my name is Ada and I like tea"))
    chained = ResponseCreate(input="what is my name?", previous_response_id=await _last(counted))
    alone = await responses.count_input_tokens(ResponseCreate(input="what is my name?"))
    count = await responses.count_input_tokens(chained)
    assert count > alone
    assert count == await created_prompt(counted, chained)
    cid = (
        await responses.conversations.create(
            ConversationCreate(items=[{"role": "user", "content": "remember the number 42"}])
        )
    )["id"]
    in_conversation = ResponseCreate(input="which number?", conversation=cid)
    count = await responses.count_input_tokens(in_conversation)
    assert count > await responses.count_input_tokens(ResponseCreate(input="which number?"))
    assert count == await created_prompt(counted, in_conversation)


async def test_a_count_writes_nothing(counted: Services) -> None:
    count = await counted.responses.count_input_tokens(ResponseCreate(input="one two three"))
    assert count == 3 + 2
    assert await counted.store.by_type(ACCEPTED) == [] and counted.engine.jobs == []


async def test_a_count_refuses_what_a_create_refuses(counted: Services) -> None:
    responses = counted.responses
    with pytest.raises(InvalidRequest) as missing:
        await responses.count_input_tokens(ResponseCreate())
    assert missing.value.param == "input"
    with pytest.raises(InvalidRequest) as chained:
        await responses.count_input_tokens(ResponseCreate(input="x", previous_response_id="resp_0"))
    assert chained.value.code == "previous_response_not_found"
    with pytest.raises(NotFound):
        await responses.count_input_tokens(ResponseCreate(input="x", conversation="conv_0"))


async def _last(services: Services) -> str:
    """The id of the last response created (the scripted engine's last job's)."""
    return (await services.store.by_type("response.created"))[-1].stream_id
