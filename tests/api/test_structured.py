"""Structured outputs and forced calls from real MLX generation (the tiny random llama, whose
unconstrained text is noise): JSON schemas, JSON objects and required tool calls are enforced
by the grammar while decoding, on both APIs, through the strict SDK; a schema the grammar
cannot enforce is a 400 that names it, before anything is generated."""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel, Field

from tests.api._helpers import MODEL

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
    },
    "required": ["name", "age", "role", "tags"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 10},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    },
}
TIME = {
    "type": "function",
    "name": "get_time",
    "parameters": {
        "type": "object",
        "properties": {"zone": {"enum": ["UTC", "CET"]}},
        "required": ["zone"],
        "additionalProperties": False,
    },
}


def chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}


class Person(BaseModel):
    # Bounded: a random model fills an unbounded string until max tokens run out.
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=120)
    role: Literal["admin", "user", "guest"]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_responses_json_schema_output_is_valid(client: OpenAI, temperature: float) -> None:
    response = client.responses.create(
        model=MODEL,
        input="Describe a person.",
        temperature=temperature,
        max_output_tokens=300,
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON}},
    )
    assert response.status == "completed", response.incomplete_details
    jsonschema.validate(json.loads(response.output_text), PERSON)


def test_responses_parse_with_a_pydantic_model(client: OpenAI) -> None:
    parsed = client.responses.parse(
        model=MODEL, input="A person, please.", text_format=Person, max_output_tokens=300
    )
    assert isinstance(parsed.output_parsed, Person)


def test_json_object_on_both_apis(client: OpenAI, server: Any) -> None:
    # Any object: its keys and values are unbounded, which a random model never closes by
    # chance, so closing quotes and braces are favoured (the grammar still decides).
    closers = {str(t): 20 for c in '"}' for t in server.state.engine.encode(c)}
    response = client.responses.create(
        model=MODEL,
        input="Some JSON.",
        max_output_tokens=300,
        text={"format": {"type": "json_object"}},
        extra_body={"logit_bias": closers},
    )
    assert isinstance(json.loads(response.output_text), dict)
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Some JSON."}],
        max_tokens=300,
        response_format={"type": "json_object"},
        logit_bias=closers,
    )
    assert isinstance(json.loads(completion.choices[0].message.content or ""), dict)


def test_chat_json_schema_streamed_and_parsed(client: OpenAI) -> None:
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "A person."}],
        max_tokens=300,
        response_format=fmt,
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), PERSON)
    parsed = client.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "A person."}],
        max_tokens=300,
        response_format=Person,
    )
    assert isinstance(parsed.choices[0].message.parsed, Person)


def test_a_required_call_is_made_and_valid_on_responses(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input="Weather or time?",
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        tool_choice="required",
        parallel_tool_calls=False,  # one call, not a list of them
        max_output_tokens=300,
    )
    assert response.status == "completed"
    (call,) = response.output
    assert call.type == "function_call"
    tool = {"get_weather": WEATHER, "get_time": TIME}[call.name]
    jsonschema.validate(json.loads(call.arguments), tool["parameters"])


def test_a_named_call_streams_on_chat(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "What time is it?"}],
            tools=[chat_tool(WEATHER), chat_tool(TIME)],  # type: ignore[list-item]
            tool_choice={"type": "function", "function": {"name": "get_time"}},
            parallel_tool_calls=False,
            max_tokens=300,
            stream=True,
        )
    )
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert [c.function.name for c in calls if c.function] == ["get_time"]
    assert calls[0].function is not None
    jsonschema.validate(json.loads(calls[0].function.arguments or ""), TIME["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("seed", range(4))
def test_parallel_required_calls_on_chat_are_each_valid(client: OpenAI, seed: int) -> None:
    """parallel_tool_calls (the default): the grammar allows one call or a JSON list of them;
    every call is valid, indexed in order, with an id of its own."""
    done = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather and time?"}],
        tools=[chat_tool(WEATHER), chat_tool(TIME)],  # type: ignore[list-item]
        tool_choice="required",
        seed=seed,
        max_tokens=400,
    )
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls or []
    assert calls and len({c.id for c in calls}) == len(calls)
    for call in calls:
        tool = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]  # type: ignore[union-attr]
        jsonschema.validate(json.loads(call.function.arguments), tool["parameters"])  # type: ignore[union-attr]


def test_an_unsupported_schema_is_a_400_naming_it(client: OpenAI, server: Any) -> None:
    before = server.state.engine.generations
    bad = {"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}}
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model=MODEL,
            input="x",
            text={"format": {"type": "json_schema", "name": "bad", "schema": bad}},
        )
    assert info.value.param == "text.format.schema"
    assert "cannot be enforced" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": bad}},
        )
    assert info.value.param == "response_format.json_schema.schema"
    assert server.state.engine.generations == before


def test_a_strict_tool_in_auto_mode_gets_valid_arguments_or_text(
    client: OpenAI, server: Any
) -> None:
    """tool_choice auto with a strict tool: the model may answer in text, but an output that
    opens a JSON object must be a valid call. Here the random model is pushed to open one."""
    brace = {str(t): 30 for t in server.state.engine.encode("{")}
    strict = {**WEATHER, "strict": True}
    response = client.responses.create(
        model=MODEL,
        input="Weather?",
        tools=[strict],  # type: ignore[list-item]
        max_output_tokens=300,
        extra_body={"logit_bias": brace},
    )
    (call,) = response.output
    assert call.type == "function_call", response.output
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])

    plain = client.responses.create(
        model=MODEL,
        input="Weather?",
        tools=[strict],
        max_output_tokens=8,  # type: ignore[list-item]
    )
    assert plain.output[0].type == "message"  # free text: the random model opens no object
    assert not plain.output_text.lstrip().startswith("{")


@pytest.mark.parametrize("fmt", [[1, None], "json", 3])
def test_a_format_that_is_not_an_object_is_a_400(http: Any, fmt: Any) -> None:
    """Found by the probe's fuzzer: a list here was a 500."""
    body = {"model": MODEL, "input": "hi", "text": {"format": fmt}}
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "text.format"


def test_a_required_call_cut_by_the_limit_is_no_text(client: OpenAI) -> None:
    """The output limit cuts a forced call mid-way (6 tokens cannot complete one): it does not
    come back as text, and the answer ends incomplete (Responses) or with length (Chat)."""
    response = client.responses.create(
        model=MODEL,
        input="Weather in Paris?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        max_output_tokens=6,
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output == [] and response.output_text == ""
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[chat_tool(WEATHER)],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=6,
    )
    (choice,) = completion.choices
    assert choice.finish_reason == "length"
    assert choice.message.content is None and not choice.message.tool_calls
