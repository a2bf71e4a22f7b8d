"""Sampling on both APIs (issue "A fast engine"): seeds reproduce (alone and inside a batch)
and differ from each other; stop sequences end a chat early and are never sent; logprobs
have one entry per output token, k alternatives sorted best first, and add up like
probabilities.

Chat requests that would be replayed from the completion cache (temperature 0 or a seed)
are sent with `cache-control: no-cache`, so each is generated again.
"""

from __future__ import annotations

import math
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.api._helpers import EOS, MODEL

NO_CACHE = {"cache-control": "no-cache"}


def key(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def respond(client: OpenAI, text: str, **body: Any) -> Any:
    r = client.responses.create(model=MODEL, input=text, **body)
    assert r.status in ("completed", "incomplete"), r.error
    return r


def seeded(client: OpenAI, seed: int, tag: str = "", **extra: Any) -> tuple[str, int]:
    r = respond(
        client,
        "sampling: a seeded request",
        temperature=1.0,
        max_output_tokens=40,
        prompt_cache_key=key(f"seed{tag}"),
        extra_body={"seed": seed, "logit_bias": {str(EOS): -100}, **extra},
    )
    return r.output_text, r.usage.output_tokens


# --- seeds --------------------------------------------------------------------------------


def test_same_seed_same_output_alone(client: OpenAI) -> None:
    first = seeded(client, 1234)
    assert first[1] == 40 and first[0]
    assert seeded(client, 1234) == first
    assert seeded(client, 1234, top_k=0) == first  # an explicit default changes nothing


def test_same_seed_same_output_inside_a_batch(client: OpenAI) -> None:
    alone = seeded(client, 777)
    barrier = threading.Barrier(6)

    def noise(i: int) -> str:
        barrier.wait(timeout=10)
        return respond(
            client,
            f"sampling: noise {i}",
            temperature=1.0,
            max_output_tokens=60,
            extra_body={"top_k": 10 * i, "logit_bias": {str(EOS): -100}},
        ).output_text

    def target() -> tuple[str, int]:
        barrier.wait(timeout=10)
        return seeded(client, 777, "batch")

    with ThreadPoolExecutor(6) as pool:
        noises = [pool.submit(noise, i) for i in range(4)]
        twins = [pool.submit(target), pool.submit(target)]
        assert [t.result(timeout=30) for t in twins] == [alone, alone]
        for n in noises:
            n.result(timeout=30)


def test_different_seeds_give_different_outputs(client: OpenAI) -> None:
    outputs = {seeded(client, s)[0] for s in (1, 2, 3, 4)}
    assert len(outputs) >= 3  # four draws of 40 tokens at temperature 1: almost surely 4


@pytest.mark.parametrize("seed", [0, -1, 2**63 + 5, 2**80])
def test_any_integer_seed_is_accepted_and_reproducible(client: OpenAI, seed: int) -> None:
    first = seeded(client, seed)
    assert seeded(client, seed) == first


def test_chat_seed_reproduces_without_the_replay_cache(client: OpenAI) -> None:
    def chat(seed: int | None) -> str:
        r = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "sampling: chat seed"}],
            temperature=1.0,
            max_tokens=40,
            seed=seed,
            logit_bias={str(EOS): -100},
            extra_headers=NO_CACHE,
        )
        assert r.usage is not None and r.usage.completion_tokens == 40
        return r.choices[0].message.content or ""

    first = chat(31337)
    assert chat(31337) == first
    assert len({chat(31338), chat(31339), first}) >= 2


# --- stop sequences -------------------------------------------------------------------------


def chat_text(client: OpenAI, content: str, **body: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": content}],
        temperature=0,
        extra_headers=NO_CACHE,
        **body,
    )


def pick_stop(text: str, at: int, size: int = 3) -> tuple[str, int]:
    """A stop string taken from `text` near `at` (plain characters), and where it first
    occurs."""
    for start in range(at, len(text) - size):
        stop = text[start : start + size]
        if "\ufffd" not in stop and stop.isprintable() and stop.strip() == stop:
            return stop, text.index(stop)
    raise AssertionError(f"no usable stop string in {text!r}")


def test_chat_stop_sequence_ends_early_and_is_not_sent(client: OpenAI) -> None:
    prompt = "sampling: stop me"
    full = chat_text(client, prompt, max_tokens=300)
    text = full.choices[0].message.content or ""
    assert full.usage.completion_tokens == 300 and full.choices[0].finish_reason == "length"
    stop, index = pick_stop(text, 40)
    assert 0 < index < len(text) // 2

    stopped = chat_text(client, prompt, max_tokens=300, stop=[stop, "never-seen-zzz"])
    choice = stopped.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.content == text[:index]
    assert stop not in (choice.message.content or "")
    # The engine stopped soon after the stop text, far from max_tokens.
    assert stopped.usage is not None
    assert stopped.usage.completion_tokens < 150

    # Streamed: the same text, chunk by chunk, the stop text in no chunk nor across chunks.
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            temperature=0,
            max_tokens=300,
            stop=stop,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=NO_CACHE,
        )
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == text[:index]
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens < 150


def test_stop_sequence_in_the_first_characters(client: OpenAI) -> None:
    prompt = "sampling: stop at once"
    full = chat_text(client, prompt, max_tokens=60)
    text = full.choices[0].message.content or ""
    stop = next(text[i : i + 2] for i in range(len(text)) if "\ufffd" not in text[i : i + 2])
    stopped = chat_text(client, prompt, max_tokens=300, stop=stop)
    assert stopped.choices[0].message.content == text[: text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage is not None and stopped.usage.completion_tokens < 150


# --- logprobs -------------------------------------------------------------------------------


def check_entries(entries: list[Any], k: int, output_tokens: int, greedy: bool) -> None:
    assert len(entries) == output_tokens
    for e in entries:
        assert e.logprob <= 0
        tops = [t.logprob for t in e.top_logprobs]
        assert len(tops) == k
        assert tops == sorted(tops, reverse=True)
        assert all(t <= 0 for t in tops)
        assert sum(math.exp(t) for t in tops) <= 1 + 1e-3
        same = [t.logprob for t in e.top_logprobs if t.token == e.token and t.bytes == e.bytes]
        if same:  # the chosen token is among the alternatives: the same number
            assert any(math.isclose(e.logprob, t, abs_tol=1e-5) for t in same), (e, same)
        if greedy and tops:  # the chosen token is the best one
            assert math.isclose(e.logprob, tops[0], abs_tol=1e-5)


@pytest.mark.parametrize("k", [0, 1, 5, 20])
def test_responses_logprobs_shape(client: OpenAI, k: int) -> None:
    r = respond(
        client,
        "sampling: logprobs please",
        temperature=0,
        max_output_tokens=40,
        top_logprobs=k,
        include=["message.output_text.logprobs"],
    )
    part = r.output[0].content[0]
    assert part.type == "output_text"
    assert part.logprobs is not None
    check_entries(part.logprobs, k, r.usage.output_tokens, greedy=True)
    assert r.top_logprobs == k


def test_responses_logprobs_sampled_sum_to_at_most_one(client: OpenAI) -> None:
    r = respond(
        client,
        "sampling: sampled logprobs",
        temperature=1.0,
        max_output_tokens=60,
        top_logprobs=20,
        include=["message.output_text.logprobs"],
        extra_body={"seed": 5},
    )
    entries = r.output[0].content[0].logprobs
    check_entries(entries, 20, r.usage.output_tokens, greedy=False)
    # With 20 of the tiny vocabulary's ~400 tokens, most of the mass is there.
    assert all(sum(math.exp(t.logprob) for t in e.top_logprobs) > 0.2 for e in entries)


def test_responses_logprobs_streamed_match_the_final_response(client: OpenAI) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "input": "sampling: streamed logprobs",
        "temperature": 0,
        "max_output_tokens": 30,
        "top_logprobs": 3,
        "include": ["message.output_text.logprobs"],
    }
    streamed: list[Any] = []
    final: Any = None
    with client.responses.create(stream=True, **body) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                streamed += event.logprobs
            elif event.type in ("response.completed", "response.incomplete"):
                final = event.response
    assert final is not None
    entries = final.output[0].content[0].logprobs
    check_entries(entries, 3, final.usage.output_tokens, greedy=True)
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in entries]


def test_no_logprobs_unless_included(client: OpenAI) -> None:
    r = respond(
        client, "sampling: no logprobs", temperature=0, max_output_tokens=10, top_logprobs=3
    )
    assert not r.output[0].content[0].logprobs


@pytest.mark.parametrize("k", [0, 3, 20])
def test_chat_logprobs_shape(client: OpenAI, k: int) -> None:
    r = chat_text(client, "sampling: chat logprobs", max_tokens=40, logprobs=True, top_logprobs=k)
    lp = r.choices[0].logprobs
    assert lp is not None and lp.content is not None
    assert r.usage is not None
    check_entries(lp.content, k, r.usage.completion_tokens, greedy=True)


def test_chat_logprobs_of_a_stream(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "sampling: streamed chat logprobs"}],
            temperature=1.0,
            seed=11,
            max_tokens=40,
            logprobs=True,
            top_logprobs=20,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=NO_CACHE,
        )
    )
    entries = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content
        for e in c.choices[0].logprobs.content
    ]
    usage = chunks[-1].usage
    assert usage is not None
    check_entries(entries, 20, usage.completion_tokens, greedy=False)


def test_chat_top_logprobs_over_20_is_refused(server: Any) -> None:
    r = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "x"}],
            "logprobs": True,
            "top_logprobs": 21,
        },
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "top_logprobs"


def test_logprob_bytes_reassemble_the_output_text(client: OpenAI) -> None:
    """`bytes` is each token's own UTF-8 bytes, so that characters split over several tokens
    can be put back together: joined, they decode to the output text. The tiny model emits
    lone byte tokens (parts of multi-byte characters) often, so this is exercised."""
    r = respond(
        client,
        "Tell me about the quick brown fox please",
        temperature=0,
        max_output_tokens=60,
        top_logprobs=0,
        include=["message.output_text.logprobs"],
        prompt_cache_key=key("bytes"),
    )
    entries = r.output[0].content[0].logprobs
    assert any("\ufffd" in e.token for e in entries)  # a token that is part of a character
    joined = bytes(b for e in entries for b in e.bytes).decode("utf-8", errors="replace")
    # (the detokenizer drops one leading space of an answer)
    assert r.output_text in (joined, joined.removeprefix(" "))
