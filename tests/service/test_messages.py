"""MessagesService (Anthropic's Messages API) on the in-memory store and the scripted engine:
the events a message records, in order, for an answer, a tool call, a stop sequence, the
output limit and thinking; a tool result's round trip into the prompt; the fold against the
stream; a cancel; another key's message; the grammar of output_config.format; and the 400s
the request's shape refuses (tests/api/test_messages.py: what only HTTP shows)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from omni.errors import InvalidRequest, NotFound
from omni.events import MemoryStore, StoredEvent
from omni.ports.chat import Capabilities
from omni.ports.jobs import Delta, Failed, Finished, Output
from omni.schemas.body import parse_body
from omni.schemas.chat import ChatCompletionCreate
from omni.schemas.messages import MessageCreate
from omni.service.messages import MessagesService
from omni.service.sealing import Sealer

from .conftest import ScriptedEngine, Services, serving

MODEL = "scripted"
HELLO: list[Output] = [Delta("Hel", 10), Delta("lo", 11), Finished("stop", 3, 2)]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


class Rendering(ScriptedEngine):
    """A scripted engine (it keeps the conversations it was asked to render) of the given
    capabilities."""

    def __init__(self, capabilities: Capabilities | None = None) -> None:
        super().__init__()
        if capabilities is not None:
            self.capabilities = capabilities


class Messaging:
    """The services with the messages service wired as the server wires it."""

    def __init__(self, served: Services, sealer: Sealer):
        self.served = served
        self.engine = served.engine
        self.sealer = sealer
        self.messages = MessagesService(served.completions, sealer)

    async def run(
        self, body: dict[str, Any], script: list[Output] | None = None, owner: str | None = None
    ) -> tuple[str, list[StoredEvent]]:
        """A message read to its end by its client: its id and its events as recorded."""
        if script is not None:
            self.engine.scripts.append(script)
        mid, _ = await self.messages.create(MessageCreate.model_validate(body), owner)
        events = await self.messages.wait(mid)
        self.messages.release(mid)
        return mid, events

    async def accepted(self, mid: str) -> dict[str, Any]:
        rows = await self.served.store.read(f"{mid}/request")
        return dict(json.loads(rows[0].data))


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Rendering:
    """A plain scripted model, or one with the capabilities a test's parameter names."""
    return Rendering(getattr(request, "param", None))


@pytest.fixture
async def messaging(engine: Rendering) -> AsyncIterator[Messaging]:
    async with serving(MemoryStore(), engine) as served:
        yield Messaging(served, Sealer(os.urandom(32)))


def ask(text: str = "hi", **more: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 16,
        "temperature": 0,
        "messages": [{"role": "user", "content": text}],
        **more,
    }


def shapes(events: list[StoredEvent]) -> list[tuple[str, ...]]:
    """Each event as (its type, and the type of its block or delta where it has one)."""
    out: list[tuple[str, ...]] = []
    for e in events:
        data = json.loads(e.data)
        inner = data.get("content_block") or data.get("delta") or {}
        out.append((e.type, inner["type"]) if "type" in inner else (e.type,))
    return out


def datas(events: list[StoredEvent]) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in events]


# --- what a message records -------------------------------------------------------------


async def test_a_text_answer_records_anthropics_events_in_order(messaging: Messaging) -> None:
    mid, events = await messaging.run(ask(), HELLO)
    assert shapes(events) == [
        ("message_start",),
        ("content_block_start", "text"),
        ("content_block_delta", "text_delta"),
        ("content_block_delta", "text_delta"),
        ("content_block_stop",),
        ("message_delta",),
        ("message_stop",),
    ]
    data = datas(events)
    assert all(d["type"] == e.type for d, e in zip(data, events, strict=True))
    assert [e.seq for e in events] == list(range(len(events)))
    start = data[0]["message"]
    assert start["id"] == mid and mid.startswith("msg_")
    assert (start["type"], start["role"], start["model"]) == ("message", "assistant", MODEL)
    assert (start["content"], start["stop_reason"], start["stop_sequence"]) == ([], None, None)
    assert start["usage"]["input_tokens"] == 3 and start["usage"]["output_tokens"] == 0
    assert data[1]["content_block"] == {"type": "text", "text": ""}
    assert [d["delta"]["text"] for d in data[2:4]] == ["Hel", "lo"]
    assert {d["index"] for d in data[1:5]} == {0}
    assert data[5]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert data[5]["usage"]["output_tokens"] == 2
    assert data[6] == {"type": "message_stop"}


async def test_the_fold_is_what_the_stream_carries(messaging: Messaging) -> None:
    """The non-streamed answer (the fold) is the stream's content, whole, and the message
    read back later is the same."""
    mid, events = await messaging.run(ask(), HELLO)
    message = messaging.messages.fold(events)
    assert message["content"] == [{"type": "text", "text": "Hello"}]
    assert (message["id"], message["stop_reason"], message["stop_sequence"]) == (
        mid,
        "end_turn",
        None,
    )
    assert message["usage"]["input_tokens"] == 3 and message["usage"]["output_tokens"] == 2
    assert await messaging.messages.retrieve(mid) == message


async def test_a_replayed_message_is_a_copy_under_its_own_id(messaging: Messaging) -> None:
    first, events = await messaging.run(ask(), HELLO)
    second, again = await messaging.run(ask())  # deterministic: the cache answers it
    assert second != first and len(messaging.engine.jobs) == 1
    folded = messaging.messages.fold(again)
    assert folded["id"] == second
    assert folded["content"] == messaging.messages.fold(events)["content"]


async def test_an_empty_answer_has_no_block(messaging: Messaging) -> None:
    _, events = await messaging.run(ask(), [Finished("stop", 3, 0)])
    assert shapes(events) == [("message_start",), ("message_delta",), ("message_stop",)]
    message = messaging.messages.fold(events)
    assert (message["content"], message["stop_reason"]) == ([], "end_turn")


async def test_a_failure_ends_the_stream_with_anthropics_error(messaging: Messaging) -> None:
    """The engine fails mid-answer: the open block is closed, then Anthropic's `error` event
    ends the stream (no message_delta, no message_stop)."""
    _, events = await messaging.run(ask(), [Delta("Hel", 10), Failed("the engine broke")])
    assert shapes(events) == [
        ("message_start",),
        ("content_block_start", "text"),
        ("content_block_delta", "text_delta"),
        ("content_block_stop",),
        ("error",),
    ]
    error = json.loads(events[-1].data)
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    assert isinstance(error["error"]["message"], str) and error["error"]["message"]


async def test_an_identical_message_under_way_is_followed_not_generated(
    messaging: Messaging,
) -> None:
    """Single flight: a deterministic twin sent while the first is generating follows its
    stream (one job), as a copy under its own id."""
    messaging.engine.scripts.append([Delta("Hel", 10)])  # held open until the test ends it
    body = MessageCreate.model_validate(ask())
    first, _ = await messaging.messages.create(body)
    twin, hit = await messaging.messages.create(body)
    (job,) = messaging.engine.jobs
    job.outputs.put_nowait(Delta("lo", 11))
    job.outputs.put_nowait(Finished("stop", 3, 2))
    answers = []
    for mid in (first, twin):
        answers.append(messaging.messages.fold(await messaging.messages.wait(mid)))
        messaging.messages.release(mid)
    assert hit and twin != first
    assert [a["id"] for a in answers] == [first, twin]
    assert answers[0]["content"] == answers[1]["content"] == [{"type": "text", "text": "Hello"}]
    assert (await messaging.accepted(twin))["mirror_of"] == first


# --- tools -----------------------------------------------------------------------------

CALL = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})


@pytest.mark.parametrize(
    "tool_choice",
    [
        {"type": "any"},
        {"type": "tool", "name": "get_weather"},
        {"type": "auto", "disable_parallel_tool_use": True},
    ],
)
async def test_a_tool_call_is_a_tool_use_block(
    messaging: Messaging, tool_choice: dict[str, Any]
) -> None:
    mid, events = await messaging.run(
        ask("Weather in Paris?", tools=[WEATHER], tool_choice=tool_choice),
        [Delta(CALL, 10), Finished("stop", 3, 1)],
    )
    kinds = shapes(events)
    assert kinds[1:4] == [
        ("content_block_start", "tool_use"),
        ("content_block_delta", "input_json_delta"),
        ("content_block_stop",),
    ], kinds
    block = json.loads(events[1].data)["content_block"]
    assert block["id"].startswith("toolu_") and block["name"] == "get_weather"
    assert block["input"] == {}  # streamed as input_json_delta, as Anthropic does
    message = messaging.messages.fold(events)
    (use,) = message["content"]
    assert use == {
        "type": "tool_use",
        "id": block["id"],
        "name": "get_weather",
        "input": {"city": "Paris"},
    }
    assert message["stop_reason"] == "tool_use"
    plan = (await messaging.accepted(mid))["plan"]
    mode = {"any": "required", "tool": "required", "auto": "auto"}[tool_choice["type"]]
    assert plan["mode"] == mode or tool_choice["type"] == "tool"
    assert [t["function"]["name"] for t in plan["tools"]] == ["get_weather"]
    assert plan["parallel"] is not tool_choice.get("disable_parallel_tool_use", False)


async def test_tool_choice_none_calls_nothing(messaging: Messaging) -> None:
    mid, events = await messaging.run(
        ask("Weather?", tools=[WEATHER], tool_choice={"type": "none"}), HELLO
    )
    assert messaging.messages.fold(events)["content"] == [{"type": "text", "text": "Hello"}]
    assert (await messaging.accepted(mid))["plan"]["mode"] == "none"


TEMPLATED = Capabilities(context_length=1024, max_token_bytes=16, template_tools=True)


@pytest.mark.parametrize("engine", [None, TEMPLATED], ids=["plain", "template"], indirect=True)
async def test_a_tool_result_goes_back_into_the_prompt(
    messaging: Messaging, engine: Rendering
) -> None:
    """tool_use → tool_result → answer: the call and its result reach the template, the
    result as a tool message under the call's id where the template renders tools, else as
    the user's text a plain model reads."""
    _, events = await messaging.run(
        ask("Weather in Paris?", tools=[WEATHER], tool_choice={"type": "any"}),
        [Delta(CALL, 10), Finished("stop", 3, 1)],
    )
    (use,) = messaging.messages.fold(events)["content"]
    turn = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [use]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use["id"], "content": "18C and sunny"},
                {"type": "text", "text": "Say it in a word."},
            ],
        },
    ]
    _, answered = await messaging.run(
        {**ask(tools=[WEATHER]), "messages": turn}, [Delta("Sunny", 10), Finished("stop", 3, 1)]
    )
    assert messaging.messages.fold(answered)["content"] == [{"type": "text", "text": "Sunny"}]
    prompt = engine.rendered[-1]
    said = json.dumps(prompt)
    assert "18C and sunny" in said and "Say it in a word." in said
    assert said.index("Paris") < said.index("18C and sunny") < said.index("Say it in a word.")
    if engine.capabilities.template_tools:
        assistant, tool, user = prompt[-3:]
        (call,) = assistant["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        arguments = call["function"]["arguments"]  # parsed for a template that renders it
        assert (json.loads(arguments) if isinstance(arguments, str) else arguments) == {
            "city": "Paris"
        }
        assert (tool["role"], tool["content"]) == ("tool", "18C and sunny")
        assert tool["tool_call_id"] == call["id"]
        assert user["role"] == "user"
    else:
        assert prompt[-2]["content"] == "Result of get_weather: 18C and sunny", prompt


# --- how it stops ----------------------------------------------------------------------


async def test_a_stop_sequence_ends_it_and_is_named(messaging: Messaging) -> None:
    _, events = await messaging.run(
        ask(stop_sequences=["STOP", "END"]),
        [Delta("Hello ", 10), Delta("END", 11), Delta(" more", 12), Finished("stop", 3, 3)],
    )
    message = messaging.messages.fold(events)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")
    assert message["content"] == [{"type": "text", "text": "Hello "}]


async def test_a_stop_sequence_split_across_tokens_is_never_sent(messaging: Messaging) -> None:
    """Text that may begin a stop sequence is held back until it cannot: none of "END"
    reaches a text_delta, though it came in two pieces."""
    _, events = await messaging.run(
        ask(stop_sequences=["END"]),
        [Delta("Hello E", 10), Delta("ND more", 11), Finished("stop", 3, 2)],
    )
    sent = "".join(d["delta"].get("text", "") for d in datas(events) if "delta" in d)
    assert sent == "Hello "
    message = messaging.messages.fold(events)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")


async def test_more_stop_sequences_than_chat_completions_takes(messaging: Messaging) -> None:
    stops = [f"S{i}" for i in range(8)]
    _, events = await messaging.run(
        ask(stop_sequences=stops), [Delta("one S7 two", 10), Finished("stop", 3, 1)]
    )
    message = messaging.messages.fold(events)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "S7")


async def test_the_output_limit_is_max_tokens(messaging: Messaging) -> None:
    _, events = await messaging.run(
        ask(max_tokens=2), [Delta("Hel", 10), Delta("lo", 11), Finished("length", 3, 2)]
    )
    message = messaging.messages.fold(events)
    assert (message["stop_reason"], message["stop_sequence"]) == ("max_tokens", None)
    assert (await messaging.accepted(message["id"]))["plan"]["sampling"]["max_tokens"] == 2


# --- thinking --------------------------------------------------------------------------

THINKER = Capabilities(context_length=1024, max_token_bytes=16, thinking=("<think>", "</think>"))


@pytest.mark.parametrize("engine", [THINKER], ids=["thinker"], indirect=True)
async def test_thinking_is_a_signed_thinking_block(messaging: Messaging) -> None:
    mid, events = await messaging.run(
        ask(thinking={"type": "enabled", "budget_tokens": 64}),
        [
            Delta("<think>", 10),
            Delta("Two and ", 11),
            Delta("two.", 12),
            Delta("</think>", 13),
            Delta("Four", 14),
            Finished("stop", 3, 5),
        ],
    )
    assert shapes(events)[1:9] == [
        ("content_block_start", "thinking"),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"),
        ("content_block_stop",),
        ("content_block_start", "text"),
        ("content_block_delta", "text_delta"),
        ("content_block_stop",),
    ], shapes(events)
    thought, said = messaging.messages.fold(events)["content"]
    assert said == {"type": "text", "text": "Four"}
    assert thought["type"] == "thinking" and thought["thinking"] == "Two and two."
    opened = messaging.sealer.open(thought["signature"], "signature")
    assert opened == [{"type": "reasoning_text", "text": "Two and two."}]
    plan = (await messaging.accepted(mid))["plan"]
    assert plan["thinking"] is True
    assert plan["sampling"]["thinking_budget"] == 64


@pytest.mark.parametrize("engine", [THINKER], ids=["thinker"], indirect=True)
async def test_without_thinking_the_template_is_told_not_to_think(messaging: Messaging) -> None:
    mid, _ = await messaging.run(ask(), HELLO)
    assert (await messaging.accepted(mid))["plan"]["thinking"] is False


# --- output_config.format --------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


async def test_output_format_is_the_grammar_of_structured_outputs(messaging: Messaging) -> None:
    """output_config.format constrains decoding exactly as a chat completion's json_schema
    response_format does."""
    answer: list[Output] = [Delta('{"city": "Paris"}', 10), Finished("stop", 3, 1)]
    mid, events = await messaging.run(
        ask(output_config={"format": {"type": "json_schema", "schema": SCHEMA}}), answer
    )
    messaging.engine.scripts.append(list(answer))
    chat = ChatCompletionCreate.model_validate(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": SCHEMA, "strict": True},
            },
        }
    )
    cid, _ = await messaging.served.completions.create_chat(chat)
    await messaging.served.completions.wait(cid)
    messaging.served.completions.release(cid)
    constraint = (await messaging.accepted(mid))["plan"]["constraint"]
    rows = await messaging.served.store.read(f"{cid}/request")
    assert constraint is not None
    assert constraint == json.loads(rows[0].data)["plan"]["constraint"]
    assert messaging.messages.fold(events)["content"][0]["text"] == '{"city": "Paris"}'


# --- a client that goes, another key ----------------------------------------------------


async def test_the_client_going_cancels_the_generation(messaging: Messaging) -> None:
    """A run that would go on: once its first text is recorded, the client goes; the engine's
    job is cancelled and the stream ends with the event no client is sent."""
    messaging.engine.scripts.append([Delta("Hel", 10)])  # no end: it runs until cancelled
    mid, _ = await messaging.messages.create(MessageCreate.model_validate(ask()))
    async for event in messaging.messages.events(mid):
        if event is not None and event.type == "content_block_delta":
            break
    messaging.messages.cancel_running(mid)
    events = await asyncio.wait_for(messaging.messages.wait(mid), 10)
    messaging.messages.release(mid)
    (job,) = messaging.engine.jobs
    assert job.stop.is_set()
    assert events[-1].type == "omni.message.cancelled"
    assert "message_stop" not in [e.type for e in events]


async def test_another_keys_message_is_not_found(messaging: Messaging) -> None:
    mid, _ = await messaging.run(ask(), HELLO, owner="alice")
    assert (await messaging.messages.retrieve(mid, "alice"))["id"] == mid
    with pytest.raises(NotFound):
        await messaging.messages.retrieve(mid, "bob")
    with pytest.raises(NotFound):
        await messaging.messages.check(mid, "bob")


async def test_an_unstored_message_is_gone_once_read() -> None:
    """store: false (Omni's extension, as a chat completion's): its client reads it whole,
    then the log keeps nothing of it (purged once read, at the latest when the server
    stops); a stored one stays."""
    store = MemoryStore()
    async with serving(store, Rendering()) as served:
        messaging = Messaging(served, Sealer(os.urandom(32)))
        gone, events = await messaging.run(ask(store=False), list(HELLO))
        kept, _ = await messaging.run(ask("keep"), list(HELLO))
        assert messaging.messages.fold(events)["content"] == [{"type": "text", "text": "Hello"}]
    assert not await store.read(gone) and not await store.read(f"{gone}/request")
    assert await store.read(kept) and await store.read(f"{kept}/request")


async def test_a_chat_completion_is_no_message(messaging: Messaging) -> None:
    messaging.engine.scripts.append(list(HELLO))
    chat = ChatCompletionCreate.model_validate(
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    )
    cid, _ = await messaging.served.completions.create_chat(chat)
    await messaging.served.completions.wait(cid)
    messaging.served.completions.release(cid)
    with pytest.raises(NotFound):
        await messaging.messages.retrieve(cid)


# --- what the request's shape refuses ---------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({k: v for k, v in ask().items() if k != "max_tokens"}, "max_tokens"),
        (ask(max_tokens=0), "max_tokens"),
        ({**ask(), "messages": []}, "messages"),
        (
            {**ask(), "messages": [{"role": "user", "content": [{"type": "document"}]}]},
            "messages.0",
        ),
        (
            {
                **ask(),
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x"}]},
                    {"role": "user", "content": "and?"},
                ],
            },
            "messages.1",
        ),
        (
            ask(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]),
            "tools.0",
        ),
        (
            {
                **ask(),
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "The answer is"},
                ],
            },
            "messages",
        ),
        (ask(tool_choice={"type": "tool"}), "tool_choice"),
        (ask(thinking={"type": "enabled"}), "thinking"),
        (ask(output_config={"effort": "extreme"}), "output_config"),
        (ask(output_config={"format": {"type": "json_object"}}), "output_config"),
        (ask(stop_sequences=[""]), "stop_sequences"),
        (ask(temperature=1.5), "temperature"),
    ],
    ids=[
        "no-max-tokens",
        "zero-max-tokens",
        "no-messages",
        "unknown-block",
        "tool-result-from-assistant",
        "server-tool",
        "final-assistant",
        "tool-choice-without-name",
        "thinking-without-budget",
        "unknown-effort",
        "format-not-json-schema",
        "empty-stop",
        "temperature-over-one",
    ],
)
def test_a_bad_request_names_its_field(body: dict[str, Any], field: str) -> None:
    """A 400 whose message names the field (Anthropic's error body has no `param`)."""
    with pytest.raises(InvalidRequest) as raised:
        parse_body(json.dumps(body), MessageCreate)
    assert raised.value.status == 400
    assert raised.value.param is not None and raised.value.param.startswith(field)
    assert f"'{raised.value.param}'" in raised.value.message
