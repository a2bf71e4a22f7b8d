"""Continuous batching (issue "A fast engine"), end to end through the API on the tiny llama:
a request's tokens do not depend on what else is decoded with it, jobs join and leave a
running batch, and each job keeps its own sampling (greedy, seeded, top_k, min_p,
logit_bias).

Every comparison uses its own prompt_cache_key, so an output is really generated again and
not helped by a prefix-cache entry of the run it is compared with. Overlap is checked in the
order of the recorded events (their log positions), never on the clock of the client threads:
every request of a batch had its first text recorded before any of them ended.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from openai import OpenAI

from tests.api._helpers import EOS, MODEL, holding, one_at_a_time, read_log, wait_for
from tests.server import ServerThread

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
# How long a wait may last before it is a hang: never a margin (two loaded cores, a worker each).
HANG = 600


@dataclass
class Ran:
    id: str
    text: str
    output_tokens: int
    status: str


def key(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def stream(
    client: OpenAI, started: threading.Event | None = None, after_deltas: int = 0, **body: Any
) -> Ran:
    """One streamed response; `started` is set once `after_deltas` text deltas arrived."""
    deltas = 0
    final: Any = None
    with client.responses.create(model=MODEL, stream=True, **body) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                deltas += 1
                if started is not None and deltas >= after_deltas:
                    started.set()
            elif event.type in TERMINAL:
                final = event.response
    assert final is not None, "the stream ended without a terminal event"
    assert final.status != "failed", final.error
    assert deltas, "no text was streamed"
    assert final.usage is not None
    return Ran(final.id, final.output_text, final.usage.output_tokens, final.status)


def concurrently(client: OpenAI, server: ServerThread, bodies: list[dict[str, Any]]) -> list[Ran]:
    """All requests at once: their jobs are held until every one is submitted, then reach the
    engine together, however the client threads were scheduled."""
    with ThreadPoolExecutor(len(bodies)) as pool, holding(server) as held:
        futures = [pool.submit(stream, client, **b) for b in bodies]
        assert wait_for(lambda: len(held.jobs) == len(bodies), timeout=30)
        held.release()
        return [f.result(timeout=60) for f in futures]


def positions(server: ServerThread, rid: str, type_: str) -> list[int]:
    """Where the response's events of one type are in the log (its global order)."""
    return [e.position for e in read_log(server, rid) if e.type == type_]


def first_text(server: ServerThread, run: Ran) -> int:
    return positions(server, run.id, "response.output_text.delta")[0]


def ending(server: ServerThread, run: Ran) -> int:
    (end,) = [e.position for e in read_log(server, run.id) if e.type in TERMINAL]
    return end


def assert_overlapped(server: ServerThread, runs: list[Ran]) -> None:
    """Every run's first text was recorded before any run ended: decoded together."""
    firsts = [first_text(server, r) for r in runs]
    ends = [ending(server, r) for r in runs]
    assert max(firsts) < min(ends), (firsts, ends)


def recorded_tokens(server: ServerThread, rid: str) -> list[int]:
    """The token ids a background response generated (its `<id>/tokens` stream)."""
    return [t for row in read_log(server, f"{rid}/tokens") for t in json.loads(row.data)]


def others(tag: str, n: int = 6) -> list[dict[str, Any]]:
    """Requests that differ from the target and from each other in prompt and sampling."""
    no_eos = {"logit_bias": {str(EOS): -100}}
    variants: list[dict[str, Any]] = [
        {"temperature": 1.0, "top_p": 0.9, "extra_body": no_eos},
        {"temperature": 0.7, "extra_body": {"top_k": 5, **no_eos}},
        {"temperature": 1.0, "extra_body": {"min_p": 0.1, **no_eos}},
        {"temperature": 1.0, "extra_body": {"seed": 99, **no_eos}},
        {"temperature": 0.0, "extra_body": {"repetition_penalty": 1.3, **no_eos}},
        {"temperature": 0.0, "extra_body": {"presence_penalty": 0.5, "frequency_penalty": 0.5}},
        {"temperature": 1.3, "extra_body": {"top_k": 50, "seed": 7, **no_eos}},
    ]
    return [
        {
            "input": f"{tag}: other request number {i} says something else entirely {'x' * i}",
            "max_output_tokens": 120 + 20 * i,
            "prompt_cache_key": key(f"{tag}-other{i}"),
            **v,
        }
        for i, v in enumerate(variants[:n])
    ]


def test_greedy_tokens_are_the_same_alone_and_in_a_batch(
    client: OpenAI, server: ServerThread
) -> None:
    target = {"input": "batching: hello 0", "temperature": 0.0, "max_output_tokens": 250}
    with one_at_a_time(server):
        alone = stream(client, **target, prompt_cache_key=key("alone1"))
    # Long enough to overlap every other request: no end of sequence before the limit.
    assert alone.status == "incomplete" and alone.output_tokens == 250
    assert len(alone.text) > 100
    alone_again = stream(client, **target, prompt_cache_key=key("alone2"))
    assert (alone_again.text, alone_again.output_tokens) == (alone.text, alone.output_tokens)

    runs = concurrently(
        client, server, [{**target, "prompt_cache_key": key("batch")}, *others("b1", 6)]
    )
    assert_overlapped(server, runs)
    batched = runs[0]
    assert batched.text == alone.text
    assert batched.output_tokens == alone.output_tokens
    # The others really did differ from the target.
    assert all(r.text != alone.text for r in runs[1:])


def test_greedy_with_penalties_is_the_same_alone_and_in_a_batch(
    client: OpenAI, server: ServerThread
) -> None:
    """Logits processors keep a per-request token context: the batch does not mix them."""
    target = {
        "input": "batching: penalties apply to my own tokens only",
        "temperature": 0.0,
        "max_output_tokens": 200,
        "extra_body": {
            "repetition_penalty": 1.5,
            "frequency_penalty": 0.4,
            "logit_bias": {str(EOS): -100},
        },
    }
    with one_at_a_time(server):
        alone = stream(client, **target, prompt_cache_key=key("pen-alone"))
    runs = concurrently(
        client, server, [{**target, "prompt_cache_key": key("pen-batch")}, *others("b2")]
    )
    assert_overlapped(server, runs)
    assert (runs[0].text, runs[0].output_tokens) == (alone.text, alone.output_tokens)


def test_jobs_join_and_leave_a_running_batch(client: OpenAI, server: ServerThread) -> None:
    # Long enough that five short requests, started after its 30th token, end well before it
    # does, however slowly a loaded machine takes them in.
    n = 1500
    long = {"input": "batching: the long one", "temperature": 0.0, "max_output_tokens": n}
    short = {
        "input": "batching: a short one",
        "temperature": 0.0,
        "max_output_tokens": 15,
    }
    alone_long = stream(client, **long, prompt_cache_key=key("long-alone"))
    assert alone_long.output_tokens == n  # no end of sequence: it runs the whole way
    alone_short = stream(client, **short, prompt_cache_key=key("short-alone"))

    started = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(
            stream, client, started, 30, **long, prompt_cache_key=key("long-batch")
        )
        assert started.wait(timeout=HANG), "the long request never streamed"
        shorts = [
            {**short, "prompt_cache_key": key("short-batch")},
            *[{**b, "max_output_tokens": 10 + 5 * i} for i, b in enumerate(others("b3", 4))],
        ]
        with ThreadPoolExecutor(len(shorts)) as short_pool:
            finished = [
                f.result(timeout=HANG)
                for f in [short_pool.submit(stream, client, **b) for b in shorts]
            ]
        long_run = running.result(timeout=HANG)

    # In the log: the short ones began after the long one's 30th token and ended before it.
    joined = positions(server, long_run.id, "response.output_text.delta")[29]
    assert all(positions(server, r.id, "response.created")[0] > joined for r in finished)
    assert max(ending(server, r) for r in finished) < ending(server, long_run)
    # They joined and left mid-run without disturbing it (nor it them).
    assert (long_run.text, long_run.output_tokens) == (alone_long.text, alone_long.output_tokens)
    assert (finished[0].text, finished[0].output_tokens) == (alone_short.text, 15)
    assert [r.output_tokens for r in finished[1:]] == [10, 15, 20, 25]


def test_each_job_keeps_its_own_sampling(client: OpenAI, server: ServerThread) -> None:
    """Greedy, seeded, top_k, min_p and logit_bias side by side in one batch."""
    prompt = "batching: isolation of sampling"
    greedy = {"input": prompt, "temperature": 0.0, "max_output_tokens": 200, "background": True}
    seeded = {
        "input": "batching: a seeded one at temperature one",
        "temperature": 1.0,
        "max_output_tokens": 200,
        "extra_body": {"seed": 4242, "logit_bias": {str(EOS): -100}},
    }
    greedy_alone = stream(client, **greedy, prompt_cache_key=key("iso-greedy"))
    seeded_alone = stream(client, **seeded, prompt_cache_key=key("iso-seeded"))
    assert greedy_alone.output_tokens == 200
    tokens = recorded_tokens(server, greedy_alone.id)
    assert len(tokens) == 200
    banned, uses = Counter(tokens).most_common(1)[0]
    assert uses >= 2

    biased = {
        **greedy,
        "extra_body": {"logit_bias": {str(banned): -100}},
        "prompt_cache_key": key("iso-biased"),
    }
    runs = concurrently(
        client,
        server,
        [
            {**greedy, "prompt_cache_key": key("iso-greedy-b")},
            {**seeded, "prompt_cache_key": key("iso-seeded-b")},
            biased,
            {
                "input": "batching: top k of three",
                "temperature": 1.0,
                "max_output_tokens": 150,
                "extra_body": {"top_k": 3, "logit_bias": {str(EOS): -100}},
            },
            {
                "input": "batching: min p",
                "temperature": 1.0,
                "max_output_tokens": 150,
                "extra_body": {"min_p": 0.2, "logit_bias": {str(EOS): -100}},
            },
            {
                "input": "batching: bias toward the banned token",
                "temperature": 1.0,
                "max_output_tokens": 150,
                "extra_body": {"logit_bias": {str(banned): 5, str(EOS): -100}},
            },
        ],
    )
    assert_overlapped(server, runs)
    greedy_b, seeded_b, biased_b, *_ = runs
    assert (greedy_b.text, greedy_b.output_tokens) == (greedy_alone.text, 200)
    assert (seeded_b.text, seeded_b.output_tokens) == (seeded_alone.text, 200)
    assert banned in recorded_tokens(server, greedy_b.id)  # the request without the bias
    assert banned not in recorded_tokens(server, biased_b.id)
    assert biased_b.text != greedy_alone.text


@pytest.mark.parametrize("batch", [1, 3])
def test_batch_size_limits_how_many_decode_together(
    client: OpenAI, server: ServerThread, batch: int
) -> None:
    """With max_batch = n, the n+1-th request waits (queued) until one leaves; then it runs
    and gives its alone output."""
    engine = server.state.engine
    before, engine.max_batch = engine.max_batch, batch
    try:
        body = {"input": "batching: limited", "temperature": 0.0, "max_output_tokens": 150}
        bodies = [{**body, "prompt_cache_key": key(f"lim{i}")} for i in range(batch + 1)]
        runs = concurrently(client, server, bodies)
    finally:
        engine.max_batch = before
    texts = {r.text for r in runs}
    assert len(texts) == 1 and all(r.output_tokens == 150 for r in runs)
    # At most `batch` decoded at once: in the log, the last to start began after one ended,
    # and the first `batch` all began before any ended.
    firsts = sorted(first_text(server, r) for r in runs)
    ends = sorted(ending(server, r) for r in runs)
    assert firsts[batch - 1] < ends[0] < firsts[batch], (firsts, ends)
