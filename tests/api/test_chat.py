"""POST /v1/chat/completions (non-streaming) with the official SDK in strict mode: request
parameters, the response shape, exact usage, and the log (every completion is a stream of
its chunks; the answer is their fold)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from omni.projections.completions import fold_chat
from tests.api._helpers import MODEL, assert_error, read_log

HI: Any = [{"role": "user", "content": "hi"}]
GREEDY_PROMPT: Any = [{"role": "user", "content": "go on and on"}]  # greedy: long, no early EOS


def prompt_len(server: Any, messages: list[dict[str, Any]], tools: Any = None) -> int:
    return len(server.state.engine.render(messages, tools or []))


def check_usage(usage: Any, prompt_tokens: int, max_tokens: int | None) -> None:
    assert usage is not None
    assert usage.prompt_tokens == prompt_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None
    assert isinstance(usage.prompt_tokens_details.cached_tokens, int)
    assert usage.prompt_tokens_details.cached_tokens >= 0
    if max_tokens is not None:
        assert 0 <= usage.completion_tokens <= max_tokens


def test_create_shape_and_usage(client: OpenAI, server) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8)
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    assert completion.model == MODEL
    assert isinstance(completion.created, int) and completion.created > 1_600_000_000
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.message.tool_calls is None
    assert choice.logprobs is None
    assert choice.finish_reason in ("stop", "length")
    check_usage(completion.usage, prompt_len(server, HI), 8)
    # length ⇔ the whole budget was used; stop ⇔ EOS came first
    assert completion.usage is not None
    assert (choice.finish_reason == "length") == (completion.usage.completion_tokens == 8)


@pytest.mark.parametrize("max_tokens", [1, 3])
def test_small_max_tokens(client: OpenAI, max_tokens: int) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=GREEDY_PROMPT,
        max_tokens=max_tokens,
        temperature=0,
    )
    assert completion.usage is not None
    assert completion.usage.completion_tokens == max_tokens
    assert completion.choices[0].finish_reason == "length"


def test_max_completion_tokens_and_precedence(client: OpenAI) -> None:
    a = client.chat.completions.create(
        model=MODEL,
        messages=GREEDY_PROMPT,
        max_completion_tokens=3,
        temperature=0,
    )
    assert a.usage is not None and a.usage.completion_tokens == 3
    b = client.chat.completions.create(
        model=MODEL,
        messages=GREEDY_PROMPT,
        max_completion_tokens=2,
        max_tokens=10,
        temperature=0,
    )
    assert b.usage is not None and b.usage.completion_tokens == 2
    assert b.choices[0].finish_reason == "length"


def test_unprefixed_path(server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=10) as h:
        res = h.post("/chat/completions", json={"model": MODEL, "messages": HI, "max_tokens": 3})
    assert res.status_code == 200, res.text
    assert res.headers["content-type"].startswith("application/json")
    body = res.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")


def test_every_role_and_text_parts(client: OpenAI, server) -> None:
    messages: Any = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Dev says hi."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " there"}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "answer", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "assistant", "content": "It is 42."},
        {"role": "user", "content": "thanks", "name": "bob"},
    ]
    completion = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4)
    # System and developer messages merge into one leading system message for the template;
    # a template that knows no tools sees the call and its result as text.
    templated = [
        {"role": "system", "content": "Be brief.\n\nDev says hi."},
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": '{"name": "answer", "arguments": {}}'},
        {"role": "user", "content": "Result of answer: 42"},
        {"role": "assistant", "content": "It is 42."},
        {"role": "user", "content": "thanks"},
    ]
    check_usage(completion.usage, prompt_len(server, templated), 4)


def test_prompt_tokens_equal_the_templated_prompt(client: OpenAI, server) -> None:
    long: Any = [{"role": "user", "content": "x" * 300}]
    for messages in (HI, GREEDY_PROMPT, long):
        completion = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
        assert completion.usage is not None
        assert completion.usage.prompt_tokens == prompt_len(server, messages)


def greedy(client: OpenAI, max_tokens: int = 40, **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL,
        messages=GREEDY_PROMPT,
        max_tokens=max_tokens,
        temperature=0,
        **kwargs,
    )


def test_greedy_is_deterministic_even_without_the_cache(client: OpenAI) -> None:
    a = greedy(client, extra_headers={"cache-control": "no-cache"})
    b = greedy(client, extra_headers={"cache-control": "no-cache"})
    assert a.id != b.id
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.choices[0].finish_reason == b.choices[0].finish_reason
    assert a.usage is not None and b.usage is not None
    # (cached_tokens may differ: the engine may reuse the first one's prompt prefix)
    assert (a.usage.prompt_tokens, a.usage.completion_tokens) == (
        b.usage.prompt_tokens,
        b.usage.completion_tokens,
    )


def test_stop_string(client: OpenAI) -> None:
    full = greedy(client).choices[0].message.content
    assert full is not None and len(full) >= 12, full
    stop = full[8:11]
    stopped = greedy(client, stop=stop)
    content = stopped.choices[0].message.content
    assert content == full[: full.find(stop)]
    assert stop not in content  # type: ignore[operator]
    assert stopped.choices[0].finish_reason == "stop"
    # Billed: the tokens up to the one that completed the stop, not those the engine made
    # before it saw the cancel.
    scored = greedy(client, logprobs=True).choices[0].logprobs.content
    said = [b"".join(bytes(t.bytes) for t in scored[:n]) for n in range(len(scored) + 1)]
    end = full.find(stop) + len(stop)
    n = next(n for n, text in enumerate(said) if len(text.decode("utf-8", "ignore")) >= end)
    assert stopped.usage.completion_tokens == n, (stopped.usage, n)


def test_stop_list_earliest_wins(client: OpenAI) -> None:
    full = greedy(client).choices[0].message.content
    assert full is not None and len(full) >= 16, full
    stops = [full[12:15], full[5:7]]
    stopped = greedy(client, stop=stops)
    cut = min(full.find(s) for s in stops)
    assert stopped.choices[0].message.content == full[:cut]
    assert stopped.choices[0].finish_reason == "stop"


def test_stop_that_never_occurs_changes_nothing(client: OpenAI) -> None:
    full = greedy(client, max_tokens=20)
    other = greedy(client, max_tokens=20, stop=["\x00never\x00"])
    assert other.choices[0].message.content == full.choices[0].message.content
    assert other.choices[0].finish_reason == full.choices[0].finish_reason


def test_seed_repeats(client: OpenAI, server) -> None:
    before = server.state.engine.generations
    outs = [
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "tell me a story"}],
            temperature=1.0,
            top_p=0.9,
            seed=1234,
            max_tokens=24,
            extra_headers={"cache-control": "no-cache"},  # both really generate
        )
        for _ in range(2)
    ]
    assert server.state.engine.generations == before + 2
    assert outs[0].choices[0].message.content == outs[1].choices[0].message.content
    u0, u1 = outs[0].usage, outs[1].usage
    assert u0 is not None and u1 is not None
    assert u0.completion_tokens == u1.completion_tokens


def test_n_greater_than_one_is_a_clear_400(client: OpenAI, server) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=HI, n=2)
    assert info.value.param == "n"
    assert "n=1" in info.value.message
    one = client.chat.completions.create(model=MODEL, messages=HI, n=1, max_tokens=2)
    assert len(one.choices) == 1


def test_response_format_text_is_accepted(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=HI,
        max_tokens=2,
        response_format={"type": "text"},
    )
    assert completion.choices[0].message.content is not None


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_schema", "json_schema": {"name": "x"}},  # no schema
        {"type": "xml"},
    ],
)
def test_a_bad_response_format_is_a_400_before_generation(
    client: OpenAI,
    server,
    response_format: Any,
) -> None:
    before = server.state.engine.generations
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=HI, response_format=response_format)
    assert (info.value.param or "").startswith("response_format")
    assert server.state.engine.generations == before


TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.mark.parametrize(
    "tool_choice",
    ["auto", "none", "required", {"type": "function", "function": {"name": "get_weather"}}],
)
def test_tools_and_tool_choice_are_accepted(client: OpenAI, server, tool_choice: Any) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=HI,
        tools=TOOLS,
        tool_choice=tool_choice,
        parallel_tool_calls=False,
        max_tokens=2,
    )
    # This template renders no tools: unless no call may be made, the tools and the JSON call
    # format go into a system message, so the model can still call them.
    if tool_choice == "none":
        check_usage(completion.usage, prompt_len(server, HI), 2)
    else:
        from omni.tools.calls import plain_tools_prompt

        called = TOOLS if tool_choice in ("auto", "required") else TOOLS[:1]
        system = [{"role": "system", "content": plain_tools_prompt(called)}]
        check_usage(completion.usage, prompt_len(server, system + HI), 2)


def test_user_metadata_store_are_accepted(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=HI,
        max_tokens=2,
        user="user-1",
        metadata={"k": "v"},
        store=False,
    )
    assert completion.object == "chat.completion"


def test_unknown_top_level_keys_are_ignored(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=HI,
        max_tokens=2,
        frequency_penalty=0,
        presence_penalty=0,
        extra_body={"foo": 1, "verbosity": "low"},
    )
    assert completion.object == "chat.completion"


def test_logprobs_and_top_logprobs(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=HI,
        max_tokens=10,
        logprobs=True,
        top_logprobs=3,
    )
    assert completion.usage is not None
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert len(logprobs.content) == completion.usage.completion_tokens  # one per token
    for entry in logprobs.content:
        assert entry.logprob <= 0
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token  # exact bytes
        assert len(entry.top_logprobs) == 3
        values = [t.logprob for t in entry.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert values[0] >= entry.logprob - 1e-5  # the best alternative is at least as likely


def test_logprobs_without_top_logprobs(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=HI,
        max_tokens=4,
        logprobs=True,
    )
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert all(entry.top_logprobs == [] for entry in logprobs.content)


def test_no_logprobs_by_default(client: OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
    assert completion.choices[0].logprobs is None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, None),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "http://x"}}],
                    }
                ]
            },
            None,
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, None),
        ({"messages": [{"role": "user"}]}, None),
        ({"messages": HI, "temperature": 3}, "temperature"),
        ({"messages": HI, "top_p": 0}, "top_p"),
        ({"messages": HI, "n": 0}, "n"),
        ({"messages": HI, "max_tokens": 0}, "max_tokens"),
        ({"messages": HI, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"messages": HI, "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"messages": HI, "top_logprobs": 21}, "top_logprobs"),
    ],
)
def test_invalid_requests_are_400(
    http: httpx.Client, body: dict[str, Any], param: str | None
) -> None:
    res = http.post("/v1/chat/completions", json={"model": MODEL, **body})
    error = assert_error(res, 400)
    if param is not None:
        assert error["param"] is not None and error["param"].startswith(param), error


def test_unknown_model_is_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=HI)


def test_context_too_long_is_400(http: httpx.Client, server) -> None:
    text = "hello " * (server.state.engine.context_length + 10)
    res = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": text}]},
    )
    assert_error(res, 400, code="context_length_exceeded")


def test_invalid_json_body_is_400(http: httpx.Client) -> None:
    res = http.post(
        "/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert_error(res, 400)


def test_completion_is_a_stream_in_the_log_and_the_answer_is_its_fold(
    http: httpx.Client,
    server,
) -> None:
    res = http.post(
        "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": HI,
            "max_tokens": 6,
            "logprobs": True,
            "top_logprobs": 1,
            "store": True,  # kept: an unstored one leaves the log once read
        },
    )
    assert res.status_code == 200, res.text
    body = res.json()
    cid = body["id"]
    rows = read_log(server, cid)
    assert [r.seq for r in rows] == list(range(len(rows)))
    types = [r.type for r in rows]
    assert types[-1] == "chat.completion.usage"
    assert set(types[:-1]) == {"chat.completion.chunk"}
    chunks = [json.loads(r.data) for r in rows]
    assert all(c["id"] == cid for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-2]["choices"][0]["delta"] == {}
    assert chunks[-2]["choices"][0]["finish_reason"] == body["choices"][0]["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == body["usage"]
    # The non-streaming answer is exactly the fold of what is stored.
    assert body == fold_chat([(r.type, r.data) for r in rows])
    # The accepted request is recorded beside it.
    request = read_log(server, f"{cid}/request")
    assert request[0].type == "omni.request.accepted"
    accepted = json.loads(request[0].data)
    assert accepted["kind"] == "chat"
    assert accepted["body"]["messages"][0]["role"] == "user"
    assert accepted["body"]["messages"][0]["content"] == "hi"
    assert accepted["prompt_tokens"] == body["usage"]["prompt_tokens"]


def test_non_deterministic_requests_say_cache_miss(http: httpx.Client) -> None:
    for _ in range(2):
        res = http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": HI, "max_tokens": 2, "temperature": 1},
        )
        assert res.status_code == 200
        assert res.headers["x-omni-cache"] == "miss"


def test_an_out_of_range_seed_is_not_a_server_error(server) -> None:
    """A seed is a client value: one the engine cannot take must be refused with a 400 (or
    accepted), never fail the generation as a 500, and never take the engine down. (The
    shared engine: tests/api/test_sampling.py sends it this seed too.)"""
    srv = server
    seed = -1  # the engine's random key takes an unsigned 64-bit seed
    with httpx.Client(base_url=srv.base_url, timeout=3) as h:
        try:
            res = h.post(
                "/v1/chat/completions",
                json={
                    "model": MODEL,
                    "messages": HI,
                    "max_tokens": 2,
                    "seed": seed,
                    "temperature": 1,
                },
            )
        except httpx.TimeoutException:
            pytest.fail(f"seed={seed}: no answer within 3 s (the engine stopped serving)")
        assert res.status_code in (200, 400), (res.status_code, res.text[:300])
        if res.status_code == 400:
            assert res.json()["error"]["param"] == "seed"
        # The engine still serves.
        after = h.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": HI, "max_tokens": 2}
        )
        assert after.status_code == 200
