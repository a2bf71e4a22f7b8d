"""POST /v1/completions (legacy): prompt, max_tokens, temperature, top_p, stop, stream,
logprobs (tokens / token_logprobs / top_logprobs / text_offset) and echo."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from omni.projections.completions import fold_text
from tests.api._helpers import (
    KEEPALIVE,
    MODEL,
    assert_error,
    capture,
    purged_rows,
    read_log,
    wait_for,
)

PROMPT = "The quick brown fox"
DONE = b"data: [DONE]\n\n"


@pytest.fixture
def loose(server) -> Iterator[OpenAI]:
    """A non-strict client: the SDK types a legacy choice's finish_reason as required, so
    strict validation rejects every streamed chunk before the last (as it would OpenAI's)."""
    with OpenAI(base_url=f"{server.base_url}/v1", api_key="test", max_retries=0) as c:
        yield c


def payloads(raw: bytes) -> list[dict[str, Any]]:
    assert raw.endswith(DONE), raw[-200:]
    assert b"event:" not in raw
    out = []
    for block in raw.replace(KEEPALIVE, b"").split(b"\n\n")[:-1]:
        assert block.startswith(b"data: "), block[:200]
        out.append(block[len(b"data: ") :].decode())
    assert out[-1] == "[DONE]"
    return [json.loads(p) for p in out[:-1]]


def prompt_len(server: Any, prompt: str) -> int:
    return len(server.state.engine.encode(prompt))


def test_create_shape_and_usage(client: OpenAI, server) -> None:
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6)
    assert completion.id.startswith("cmpl-")
    assert completion.object == "text_completion"
    assert completion.model == MODEL
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.index == 0 and isinstance(choice.text, str)
    assert choice.logprobs is None
    assert choice.finish_reason in ("stop", "length")
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens == prompt_len(server, PROMPT)
    assert usage.completion_tokens <= 6
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert (choice.finish_reason == "length") == (usage.completion_tokens == 6)


def test_default_max_tokens_is_16(client: OpenAI) -> None:
    completion = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0)
    assert completion.usage is not None and completion.usage.completion_tokens <= 16


def test_unprefixed_path(server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=10) as h:
        res = h.post("/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 2})
    assert res.status_code == 200, res.text
    assert res.json()["object"] == "text_completion"


def test_temperature_and_top_p(client: OpenAI) -> None:
    completion = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0.7, top_p=0.5
    )
    assert completion.choices[0].finish_reason in ("stop", "length")


def greedy(client: OpenAI, **kwargs: Any) -> Any:
    return client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=kwargs.pop("max_tokens", 40), temperature=0, **kwargs
    )


def test_greedy_is_deterministic(client: OpenAI) -> None:
    a, b = greedy(client), greedy(client)
    assert a.id != b.id
    assert a.choices[0].text == b.choices[0].text


def test_seed_repeats(client: OpenAI) -> None:
    a, b = (
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=1, seed=7)
        for _ in range(2)
    )
    assert a.choices[0].text == b.choices[0].text


def test_echo_puts_the_prompt_first(client: OpenAI) -> None:
    plain = greedy(client, max_tokens=10).choices[0].text
    echoed = greedy(client, max_tokens=10, echo=True).choices[0].text
    assert echoed == PROMPT + plain


def test_stop(client: OpenAI) -> None:
    full = greedy(client).choices[0].text
    if len(full) < 10:
        pytest.skip(f"greedy text too short for a stop test: {full!r}")
    stop = full[5:8]
    stopped = greedy(client, stop=[stop, "\x00nope"])
    assert stopped.choices[0].text == full[: full.find(stop)]
    assert stopped.choices[0].finish_reason == "stop"


def test_logprobs(client: OpenAI) -> None:
    completion = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=8, logprobs=3, temperature=0
    )
    usage = completion.usage
    assert usage is not None
    lp = completion.choices[0].logprobs
    assert lp is not None
    assert lp.tokens is not None and lp.token_logprobs is not None
    assert lp.top_logprobs is not None and lp.text_offset is not None
    n = usage.completion_tokens
    assert (
        len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    )
    assert all(v <= 0 for v in lp.token_logprobs)
    # Tokens that decode to the same text collapse into one key: at most 3.
    assert all(1 <= len(top) <= 3 for top in lp.top_logprobs)
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        # Greedy: the chosen token is the most likely one, and is among the top ones.
        assert max(top.values()) == pytest.approx(value, abs=1e-5)
        assert top.get(token) == pytest.approx(value, abs=1e-5)
    if n:
        assert lp.text_offset[0] == 0
    for i in range(n - 1):
        assert lp.text_offset[i + 1] == lp.text_offset[i] + len(lp.tokens[i])


def test_logprobs_with_echo_offsets_start_after_the_prompt(client: OpenAI) -> None:
    completion = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=5, logprobs=1, echo=True, temperature=0
    )
    choice = completion.choices[0]
    assert choice.text.startswith(PROMPT)
    lp = choice.logprobs
    assert lp is not None and lp.text_offset is not None and lp.tokens is not None
    if lp.text_offset:
        assert lp.text_offset[0] == len(PROMPT)


def test_logprobs_over_5_is_400(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt=PROMPT, logprobs=6)
    assert info.value.param == "logprobs"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": ["a", "b"]}, "prompt"),
        ({}, "prompt"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "n": 2}, "n"),
        ({"prompt": "x", "temperature": -1}, "temperature"),
    ],
)
def test_invalid_requests(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    error = assert_error(http.post("/v1/completions", json={"model": MODEL, **body}), 400)
    assert error["param"] is not None and error["param"].startswith(param)


def test_prompt_list_of_one(client: OpenAI) -> None:
    completion = client.completions.create(model=MODEL, prompt=[PROMPT], max_tokens=2)
    assert completion.object == "text_completion"


def test_stream_raw_frames_and_log(http: httpx.Client, server, client: OpenAI) -> None:
    """The frames are the log's rows; with store false, they leave the log once read."""
    with purged_rows(server) as purged:
        res, raw = capture(
            http,
            "POST",
            "/v1/completions",
            json={
                "model": MODEL,
                "prompt": PROMPT,
                "max_tokens": 12,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                "store": False,
            },
        )
        cid = payloads(raw)[0]["id"]
        assert wait_for(lambda: cid in purged)
    assert read_log(server, cid) == []
    assert res.status_code == 200
    assert res.headers["content-type"].startswith("text/event-stream")
    chunks = payloads(raw)
    cid = chunks[0]["id"]
    assert cid.startswith("cmpl-")
    for c in chunks:
        assert c["object"] == "text_completion" and c["id"] == cid and c["model"] == MODEL
    *body, usage = chunks
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] <= 12
    assert all(c["usage"] is None and len(c["choices"]) == 1 for c in body)
    assert [c["choices"][0]["finish_reason"] for c in body][:-1] == [None] * (len(body) - 1)
    assert body[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    text = "".join(c["choices"][0]["text"] for c in body)
    # Greedy: the same text as the non-streamed answer.
    assert text == greedy(client, max_tokens=12).choices[0].text
    rows = purged[cid]
    assert [r.data for r in rows] == [
        json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in chunks
    ]
    assert rows[-1].type == "text_completion.usage"
    assert fold_text([(r.type, r.data) for r in rows])["choices"][0]["text"] == text


def test_stream_without_usage(http: httpx.Client) -> None:
    _, raw = capture(
        http,
        "POST",
        "/v1/completions",
        json={"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "stream": True},
    )
    chunks = payloads(raw)
    assert all(c["usage"] is None and len(c["choices"]) == 1 for c in chunks)


def test_stream_with_sdk(loose: OpenAI) -> None:
    chunks = list(
        loose.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=6, stream=True, echo=True, logprobs=1
        )
    )
    assert chunks[0].choices[0].text == PROMPT  # echo: the prompt goes out first
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    offsets = [
        o
        for c in chunks
        if c.choices[0].logprobs is not None
        for o in (c.choices[0].logprobs.text_offset or [])
    ]
    assert offsets == sorted(offsets)
    assert not offsets or offsets[0] == len(PROMPT)


def test_non_stream_is_the_fold_of_the_log(http: httpx.Client, server) -> None:
    with purged_rows(server) as purged:
        asked = {"model": MODEL, "prompt": PROMPT, "max_tokens": 5, "logprobs": 2, "echo": True}
        res = http.post("/v1/completions", json={**asked, "store": False})
        assert res.status_code == 200
        body = res.json()
        assert wait_for(lambda: body["id"] in purged)
    rows = purged[body["id"]]
    assert body == fold_text([(r.type, r.data) for r in rows])
    assert body["usage"]["prompt_tokens"] == prompt_len(server, PROMPT)
