"""POST /v1/responses (non-streaming): strict shape, exact usage, incomplete, echoes."""

from __future__ import annotations

import httpx
import pytest
from openai import OpenAI

from tests.api._helpers import MODEL


def _expected_prompt_tokens(server, messages) -> int:  # type: ignore[no-untyped-def]
    return len(server.state.engine.render(messages, []))


def _check_terminal_shape(r, max_output_tokens: int) -> None:  # type: ignore[no-untyped-def]
    assert r.object == "response"
    assert r.id.startswith("resp_")
    assert r.model == MODEL
    assert r.status in ("completed", "incomplete")
    assert r.error is None
    assert r.tools == []
    assert len(r.output) == 1
    item = r.output[0]
    assert item.type == "message" and item.role == "assistant"
    assert item.id.startswith("msg_")
    assert len(item.content) == 1
    part = item.content[0]
    assert part.type == "output_text" and part.annotations == []
    assert r.output_text == part.text
    u = r.usage
    assert u is not None
    assert 0 <= u.output_tokens <= max_output_tokens
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cache_write_tokens == 0
    assert u.input_tokens_details.cached_tokens >= 0
    assert u.output_tokens_details.reasoning_tokens == 0
    if r.status == "completed":
        assert item.status == "completed"
        assert r.completed_at is not None
        assert r.incomplete_details is None
    else:
        assert item.status == "incomplete"
        assert r.completed_at is None
        assert r.incomplete_details is not None
        assert r.incomplete_details.reason == "max_output_tokens"
        assert u.output_tokens == max_output_tokens


def test_plain_create_strict_shape_and_exact_usage(client: OpenAI, server) -> None:  # type: ignore[no-untyped-def]
    r = client.responses.create(model=MODEL, input="Hello there, how are you?", max_output_tokens=8)
    _check_terminal_shape(r, 8)
    expected = _expected_prompt_tokens(
        server, [{"role": "user", "content": "Hello there, how are you?"}]
    )
    assert r.usage.input_tokens == expected


def test_input_tokens_count_instructions_as_a_leading_system_message(
    client: OpenAI, server
) -> None:  # type: ignore[no-untyped-def]
    r = client.responses.create(
        model=MODEL, instructions="Answer briefly.", input="What is Omni?", max_output_tokens=4
    )
    _check_terminal_shape(r, 4)
    expected = _expected_prompt_tokens(
        server,
        [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is Omni?"},
        ],
    )
    assert r.usage.input_tokens == expected


def test_model_may_be_omitted_and_defaults_to_the_served_model(http: httpx.Client) -> None:
    res = http.post("/v1/responses", json={"input": "hi", "max_output_tokens": 2})
    assert res.status_code == 200, res.text
    assert res.json()["model"] == MODEL


def test_raw_usage_has_cache_write_tokens(http: httpx.Client) -> None:
    res = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 3})
    assert res.status_code == 200, res.text
    assert res.headers["content-type"].startswith("application/json")
    body = res.json()
    details = body["usage"]["input_tokens_details"]
    assert "cache_write_tokens" in details and "cached_tokens" in details
    assert body["output"] and body["status"] in ("completed", "incomplete")


def test_small_max_output_tokens_gives_incomplete(client: OpenAI) -> None:
    hits = 0
    for max_tokens in (1, 2, 3):
        for prompt in ("a", "The quick brown fox", "Numbers 12345"):
            r = client.responses.create(model=MODEL, input=prompt, max_output_tokens=max_tokens)
            _check_terminal_shape(r, max_tokens)
            assert r.max_output_tokens == max_tokens
            if r.usage.output_tokens == max_tokens:
                hits += 1
                assert r.status == "incomplete"
                assert r.incomplete_details.reason == "max_output_tokens"
                assert r.output[0].status == "incomplete"
            else:  # stopped at EOS before the cap
                assert r.status == "completed"
    assert hits > 0, "the random model stopped early every time (very unlikely)"


def test_every_request_field_is_echoed(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="first", max_output_tokens=2)
    fields = dict(
        instructions="Be terse.",
        metadata={"k": "v", "run": "42"},
        temperature=0.5,
        top_p=0.9,
        user="user-1",
        prompt_cache_key="cache-key-1",
        safety_identifier="safety-1",
        tool_choice="none",
        parallel_tool_calls=False,
        text={"format": {"type": "text"}, "verbosity": "low"},
        truncation="auto",
        reasoning={"effort": "low", "summary": "auto"},
        max_output_tokens=3,
        previous_response_id=first.id,
    )
    r = client.responses.create(model=MODEL, input="second", **fields)
    _check_terminal_shape(r, 3)
    assert r.instructions == "Be terse."
    assert r.metadata == {"k": "v", "run": "42"}
    assert r.temperature == 0.5
    assert r.top_p == 0.9
    assert r.user == "user-1"
    assert r.prompt_cache_key == "cache-key-1"
    assert r.safety_identifier == "safety-1"
    assert r.tool_choice == "none"
    assert r.parallel_tool_calls is False
    assert r.text.format.type == "text"
    assert r.text.verbosity == "low"
    assert r.truncation == "auto"
    assert r.reasoning.effort == "low"
    assert r.reasoning.summary == "auto"
    assert r.max_output_tokens == 3
    assert r.previous_response_id == first.id
    # The stored copy echoes the same values.
    again = client.responses.retrieve(r.id)
    assert again.model_dump() == r.model_dump()


def test_tool_choice_object_is_echoed(client: OpenAI) -> None:
    tool = {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    }
    r = client.responses.create(
        model=MODEL,
        input="weather?",
        tools=[tool],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=2,
    )
    assert r.tool_choice.type == "function" and r.tool_choice.name == "get_weather"
    assert len(r.tools) == 1 and r.tools[0].name == "get_weather" and r.tools[0].strict is True


def test_defaults_are_echoed(http: httpx.Client) -> None:
    res = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 2})
    body = res.json()
    assert body["tool_choice"] == "auto"
    assert body["parallel_tool_calls"] is True
    assert body["tools"] == []
    assert body["text"] == {"format": {"type": "text"}}
    assert body["instructions"] is None
    assert body["previous_response_id"] is None
    assert body["max_output_tokens"] == 2
    assert body["object"] == "response"
    for key in (
        "id",
        "created_at",
        "model",
        "output",
        "parallel_tool_calls",
        "tool_choice",
        "tools",
    ):
        assert key in body


@pytest.mark.parametrize("path", ["/v1/responses", "/responses"])
def test_create_under_both_prefixes(http: httpx.Client, path: str) -> None:
    res = http.post(path, json={"model": MODEL, "input": "hi", "max_output_tokens": 2})
    assert res.status_code == 200, res.text
    rid = res.json()["id"]
    other = "/responses" if path.startswith("/v1") else "/v1/responses"
    got = http.get(f"{other}/{rid}")
    assert got.status_code == 200
    assert got.json() == res.json()
