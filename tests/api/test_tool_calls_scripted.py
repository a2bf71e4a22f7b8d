"""Function calls through the whole server (real Hypercorn, SQLite and the strict SDK), with
a scripted engine: the tiny model's tokenizer and template, but every generation "writes" a
given text, so the event path of a call is tested apart from any model's skill. (Calls from
real MLX generation, forced by a grammar, are tested in test_tool_calls.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from omni.ports.jobs import Delta, Finished, Started
from tests.api._helpers import MODEL
from tests.server import serving

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
CHAT_WEATHER = {
    "type": "function",
    "function": {k: v for k, v in WEATHER.items() if k != "type"},
}
CALL_TEXT = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


class ScriptedEngine:
    """Each generation streams the next script (in small pieces), then stops."""

    def __init__(self, engine: Any):
        self._engine = engine
        self.model_id = engine.model_id
        self.capabilities = engine.capabilities  # the tiny model's template: its own
        self.queued = self.running = 0
        self.loading, self.load_error, self.memory_bytes, self.path = False, None, None, ""
        self.on_step = None
        self.scripts: list[str] = []
        self.prompts: list[list[int]] = []

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        return list(self._engine.render(messages, tools))

    def encode(self, text: str) -> list[int]:
        return list(self._engine.encode(text))

    def submit(self, job: Any) -> None:
        assert job.claim()
        self.prompts.append(list(job.prompt))
        text = self.scripts.pop(0)
        job.outputs.put_nowait(Started())
        pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
        for i, piece in enumerate(pieces):
            job.outputs.put_nowait(Delta(piece, i + 10))
        job.outputs.put_nowait(Finished("stop", len(job.prompt), len(pieces)))

    def close(self) -> None:
        pass


@pytest.fixture
def scripted(tiny_engine: Any, tmp_path: Path) -> Iterator[tuple[ScriptedEngine, OpenAI]]:
    engine = ScriptedEngine(tiny_engine)
    with serving(engine, tmp_path / "tools.db") as client:
        yield engine, client


def test_a_call_streams_as_a_function_call_item(scripted: Any) -> None:
    engine, client = scripted
    engine.scripts.append(CALL_TEXT)
    with client.responses.stream(model=MODEL, input="Weather in Paris?", tools=[WEATHER]) as s:
        events = list(s)
        final = s.get_final_response()
    types = [e.type for e in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added, done = events[2], events[5]
    assert added.item.type == "function_call" and added.item.status == "in_progress"
    assert added.item.arguments == ""
    assert done.item.id == added.item.id and done.item.call_id == added.item.call_id
    assert done.item.status == "completed"
    assert json.loads(done.item.arguments) == {"city": "Paris"}
    assert events[4].arguments == done.item.arguments
    assert [o.type for o in final.output] == ["function_call"]
    call = final.output[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert final.output_text == ""  # the call's text never reaches the answer
    again = client.responses.retrieve(final.id)
    fields = ("id", "type", "call_id", "name", "arguments", "status")
    assert again.output[0].model_dump(include=set(fields)) == call.model_dump(include=set(fields))


def test_text_before_a_call_is_a_message_then_the_call(scripted: Any) -> None:
    engine, client = scripted
    engine.scripts.append("Let me check.")  # plain text: no call
    response = client.responses.create(model=MODEL, input="Hi", tools=[WEATHER])
    assert [o.type for o in response.output] == ["message"]
    assert response.output_text == "Let me check."


def test_round_trip_through_previous_response_id_and_stateless(scripted: Any) -> None:
    engine, client = scripted
    engine.scripts += [CALL_TEXT, "It is sunny in Paris.", "Sunny."]
    first = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER])
    call = first.output[0]
    assert call.type == "function_call"
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=[result], tools=[WEATHER]
    )
    assert second.output_text == "It is sunny in Paris."
    # The call and its result reached the prompt: as text, since this template has no tools.
    rendered = engine._engine._tokenizer.decode(engine.prompts[1])
    assert '"name": "get_weather"' in rendered and "Result of get_weather: sunny, 21 C" in rendered
    items = client.responses.input_items.list(second.id)
    assert [i.type for i in items.data][:1] == ["function_call_output"]

    # Stateless: the same items sent back whole (as Codex does, store false).
    history: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        call.model_dump(exclude_none=True),
        result,
    ]
    third = client.responses.create(model=MODEL, input=history, tools=[WEATHER], store=False)
    assert third.output_text == "Sunny."
    assert engine.prompts[2] == engine.prompts[1]


def test_chat_tool_calls_stream_and_fold(scripted: Any) -> None:
    engine, client = scripted
    engine.scripts += [CALL_TEXT, CALL_TEXT]
    messages: Any = [{"role": "user", "content": "Weather in Paris?"}]
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=messages, tools=[CHAT_WEATHER], stream=True
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    assert len(calls) == 1
    assert calls[0].index == 0 and calls[0].id and calls[0].type == "function"
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert not any(d.content for d in deltas)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    completion = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[CHAT_WEATHER],
        extra_headers={"Cache-Control": "no-cache"},
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    (tool_call,) = choice.message.tool_calls
    assert tool_call.function.name == "get_weather"
    assert json.loads(tool_call.function.arguments) == {"city": "Paris"}


def test_tool_choice_none_leaves_json_as_text(scripted: Any) -> None:
    engine, client = scripted
    engine.scripts.append(CALL_TEXT)
    response = client.responses.create(model=MODEL, input="Hi", tools=[WEATHER], tool_choice="none")
    assert [o.type for o in response.output] == ["message"]
    assert response.output_text == CALL_TEXT


def test_hosted_tools_are_ignored_and_a_bad_tool_choice_is_a_400(scripted: Any) -> None:
    engine, client = scripted
    engine.scripts.append("fine")
    tools: Any = [{"type": "web_search"}, WEATHER]
    response = client.responses.create(model=MODEL, input="Hi", tools=tools)
    assert response.output_text == "fine"
    assert [t.type for t in response.tools] == ["function"]
    import openai

    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(
            model=MODEL, input="Hi", tools=[WEATHER], tool_choice={"type": "function", "name": "x"}
        )
    assert err.value.body["param"] == "tool_choice"  # type: ignore[index]


TWO_CALLS = json.dumps(
    [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_weather", "arguments": {"city": "Rome"}},
    ]
)


def test_several_calls_stream_in_order_on_both_apis(scripted: Any) -> None:
    engine, client = scripted
    engine.scripts += [TWO_CALLS, TWO_CALLS]
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Paris and Rome?"}],
            tools=[CHAT_WEATHER],
            stream=True,
        )
    )
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    firsts = [tc for tc in calls if tc.id]
    assert [tc.index for tc in firsts] == [0, 1] and len({tc.id for tc in firsts}) == 2
    cities = [
        json.loads("".join(tc.function.arguments or "" for tc in calls if tc.index == i))["city"]
        for i in (0, 1)
    ]
    assert cities == ["Paris", "Rome"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    response = client.responses.create(model=MODEL, input="Paris and Rome?", tools=[WEATHER])
    assert [item.type for item in response.output] == ["function_call", "function_call"]
    assert [json.loads(item.arguments)["city"] for item in response.output] == ["Paris", "Rome"]
    assert len({item.call_id for item in response.output}) == 2


def test_without_parallel_calls_only_the_first_is_made(scripted: Any) -> None:
    engine, client = scripted
    engine.scripts += [TWO_CALLS, TWO_CALLS]
    response = client.responses.create(
        model=MODEL, input="Paris and Rome?", tools=[WEATHER], parallel_tool_calls=False
    )
    (call,) = response.output
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Paris and Rome?"}],
        tools=[CHAT_WEATHER],
        parallel_tool_calls=False,
    )
    (tool_call,) = completion.choices[0].message.tool_calls or []
    assert json.loads(tool_call.function.arguments) == {"city": "Paris"}
    assert completion.choices[0].finish_reason == "tool_calls"
