"""A group of short prompts takes its first tokens from its own prefill pass, in the step it is
fed, while other streams decode; each job's tokens are those it gets alone: the scheduler driven
step by step on the tiny real model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load
from mlx_lm.generate import BatchGenerator

from omni.ports.jobs import Sampling
from omni.runtime.chat import batch_generator
from omni.runtime.chat.prefix_cache import PrefixCache
from omni.runtime.chat.scheduler import BatchScheduler
from omni.runtime.chat.wire import Close, Finished, Request, Spec, Started, Token
from tests.runtime.test_gather import Script, counting_passes


@pytest.fixture(scope="module")
def loaded(tiny_model_dir: Path) -> tuple[Any, Any]:
    model, tokenizer = load(str(tiny_model_dir))[:2]
    return model, tokenizer


def spec(i: int, prompt: list[int], tokens: int = 10, **sampling: Any) -> Spec:
    return Spec(i, prompt, [], "", Sampling(temperature=0.0, max_tokens=tokens, **sampling))


def run(
    loaded: tuple[Any, Any], steps: list[list[Request]], store: PrefixCache | None = None
) -> Script:
    model, tokenizer = loaded
    store = PrefixCache(model, 0, 0) if store is None else store
    scheduler = BatchScheduler(model, tokenizer, store, 16, 0.0)
    assert scheduler.first_from_prefill
    script = Script([*steps, *([[]] * 40), [Close()]])
    scheduler.run(script)  # type: ignore[arg-type]
    return script


def step_of(script: Script, kind: type, job: int) -> int:
    return next(
        k for k, out in enumerate(script.sent) for o in out if isinstance(o, kind) and o.id == job
    )


def tokens_of(script: Script, job: int) -> list[int]:
    return [o.token for out in script.sent for o in out if isinstance(o, Token) and o.id == job]


def test_this_mlx_lm_lets_a_group_join_the_batch(loaded: tuple[Any, Any]) -> None:
    """Joining uses BatchGenerator's private members: an mlx-lm without them is noticed here
    (the engine would still run, with BatchGenerator feeding prompts itself)."""
    assert batch_generator.joins(BatchGenerator(loaded[0]))


def test_a_group_arriving_mid_stream_gets_its_first_tokens_in_the_step_it_is_fed(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    passes = counting_passes(monkeypatch)
    running = [spec(0, [1, 2, 3], 30), spec(1, [1, 2, 4], 30)]
    group = [spec(i, [5, 6, 7, 8][:i]) for i in range(2, 6)]  # 2 to 4 tokens
    script = run(loaded, [running, [], [], group])
    for job in range(2, 6):
        # Started, then its first token in the same message, in the step of its pass.
        fed = step_of(script, Started, job)
        assert step_of(script, Token, job) == fed
        out = script.sent[fed]
        assert out.index(Started(job, True)) < next(
            i for i, o in enumerate(out) if isinstance(o, Token) and o.id == job
        )
        assert len(tokens_of(script, job)) == 10
    # The running streams were never padded to the group's prompts, nor the group fed twice.
    assert sorted(map(sorted, passes)) == [[2, 3, 4, 4], [3, 3]]
    # Both running streams got a token in every step until they ended.
    for job in (0, 1):
        assert len(tokens_of(script, job)) == 30


def test_each_job_of_a_group_gets_the_tokens_it_gets_alone(loaded: tuple[Any, Any]) -> None:
    """Prompts of different lengths (right-padded in the pass), one of them the tail of a
    prompt the prefix cache holds the start of."""
    model = loaded[0]
    prompts = [[1, 2, 3], [9, 8, 7, 6, 5, 4, 3], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]]
    shared = [1, 2, 3, 4, 5, 6, 7, 8]
    store = PrefixCache(model, 8, 1 << 30, 1)
    # Ended at their first tokens, in a group's pass: each keeps its prompt's cache.
    run(loaded, [[spec(99, shared, 1), spec(98, [40, 41, 42], 1)]], store)
    assert store.nearest("", [*shared, 30, 31], 2)[1] == [30, 31]
    jobs = [spec(i, p) for i, p in enumerate(prompts)] + [spec(3, [*shared, 30, 31])]
    together = run(loaded, [jobs], store)
    finished = {o.id: o for out in together.sent for o in out if isinstance(o, Finished)}
    assert finished[3].cached_tokens > 0  # the prefix was reused inside the group's pass
    for job in jobs:
        alone = run(loaded, [[job]])
        assert tokens_of(together, job.id) == tokens_of(alone, job.id), job.id


def test_a_job_ending_at_its_first_token_ends_in_its_pass(loaded: tuple[Any, Any]) -> None:
    """max_tokens 1, and an end token first (forced by a logit bias): each ends in the step of
    its pass, the others of the group decode on."""
    model, tokenizer = loaded
    eos = sorted(tokenizer.eos_token_ids)[0]
    jobs = [
        spec(0, [1, 2, 3], 1),
        spec(1, [1, 2, 4], 8, logit_bias=((eos, 100.0),)),
        spec(2, [1, 2, 5], 6),
    ]
    script = run(loaded, [jobs])
    ends = {
        o.id: (k, o) for k, out in enumerate(script.sent) for o in out if isinstance(o, Finished)
    }
    assert ends[0][0] == ends[1][0] == step_of(script, Started, 0)
    assert (ends[0][1].reason, ends[0][1].completion_tokens) == ("length", 1)
    assert (ends[1][1].reason, ends[1][1].completion_tokens) == ("stop", 0)
    assert len(tokens_of(script, 0)) == 1 and tokens_of(script, 1) == []
    assert (ends[2][1].reason, len(tokens_of(script, 2))) == ("length", 6)


def test_the_first_token_carries_its_logprobs(loaded: tuple[Any, Any]) -> None:
    script = run(loaded, [[spec(0, [1, 2, 3], 3, logprobs=2), spec(1, [4, 5, 6], 3)]])
    first = [o for out in script.sent for o in out if isinstance(o, Token)]
    by_job = {0: [o for o in first if o.id == 0], 1: [o for o in first if o.id == 1]}
    assert all(o.logprobs is not None and len(o.logprobs.top) == 2 for o in by_job[0])
    assert all(o.logprobs is None for o in by_job[1])


def test_a_kept_cache_is_named_by_the_tokens_it_holds(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job ending at its first token keeps a cache of its prompt alone (the pass never fed
    that token): named by the prompt, which a cache with no offset (a recurrent state) could
    not have corrected."""
    model = loaded[0]
    store = PrefixCache(model, 8, 1 << 30, 1)
    named: list[list[int]] = []
    insert = store.insert
    monkeypatch.setattr(
        store,
        "insert",
        lambda ns, tokens, cache, session: (
            named.append(list(tokens)),
            insert(ns, tokens, cache, session),
        ),
    )
    run(loaded, [[spec(0, [1, 2, 3, 4], 1), spec(1, [5, 6, 7], 1)]], store)
    assert sorted(named) == [[1, 2, 3, 4], [5, 6, 7]]


def test_an_empty_prompt_fails_alone(loaded: tuple[Any, Any]) -> None:
    from omni.runtime.chat.wire import Failed

    script = run(loaded, [[spec(0, []), spec(1, [1, 2, 3], 4), spec(2, [4, 5, 6], 4)]])
    sent = [o for out in script.sent for o in out]
    assert [o.id for o in sent if isinstance(o, Failed)] == [0]
    assert len(tokens_of(script, 1)) == len(tokens_of(script, 2)) == 4


def test_a_long_prompt_the_group_takes_off_the_queue_is_fed_a_chunk_a_step(
    loaded: tuple[Any, Any],
) -> None:
    """Room can free after the long prompts left the queue (a job alone, cancelled, ends in
    the same step): one still waiting goes to the chunked prefill, not into the group's pass."""
    model, tokenizer = loaded
    scheduler = BatchScheduler(model, tokenizer, PrefixCache(model, 0, 0), 4, 0.0, prefill_chunk=16)
    scheduler.waiting.extend([spec(0, list(range(5, 205))), spec(1, [1, 2, 3])])
    scheduler._take_group()
    assert [s.id for s in scheduler.prefills] == [0]
    assert [s.id for s in scheduler.group] == [1]
