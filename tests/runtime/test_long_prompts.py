"""A long prompt is fed a chunk a step on a KV cache of its own, with a decode step of the
running streams between two chunks: they keep receiving tokens, nobody is padded out to its
length, and a cancel ends it within a chunk. The engine's scheduler driven step by step
(tests/runtime/test_gather.py's pipe), tiny real model."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load

from omni.ports.jobs import Sampling
from omni.runtime.chat import watchdog
from omni.runtime.chat.prefix_cache import PrefixCache
from omni.runtime.chat.scheduler import BatchScheduler
from omni.runtime.chat.wire import (
    Cancel,
    Close,
    Finished,
    Output,
    Prefilled,
    Request,
    Spec,
    Started,
    Token,
)
from tests.runtime.test_gather import Script, counting_passes

CHUNK = 16
LONG = 40 * CHUNK  # forty chunks


@pytest.fixture(scope="module")
def loaded(tiny_model_dir: Path) -> tuple[Any, Any]:
    model, tokenizer = load(str(tiny_model_dir))[:2]
    return model, tokenizer


def job(i: int, prompt: list[int], tokens: int = 200) -> Spec:
    return Spec(i, prompt, [], "", Sampling(temperature=0.0, max_tokens=tokens))


def long_prompt(seed: int) -> list[int]:
    return [1, *((seed * 7 + k * 13) % 400 + 5 for k in range(LONG - 1))]


def run(
    loaded: tuple[Any, Any],
    steps: list[list[Request]],
    chunk: int = CHUNK,
    idle: int = 300,
    gather_s: float = 0.0,
) -> tuple[Script, BatchScheduler]:
    model, tokenizer = loaded
    scheduler = BatchScheduler(
        model, tokenizer, PrefixCache(model, 0, 0), 8, gather_s, prefill_chunk=chunk
    )
    script = Script([*steps, *([[]] * idle), [Close()]])
    scheduler.run(script)  # type: ignore[arg-type]
    return script, scheduler


def step_of(script: Script, kind: type[Output], job_id: int) -> int:
    """The first step whose outputs hold a `kind` output of the job."""
    return next(
        k
        for k, out in enumerate(script.sent)
        for o in out
        if isinstance(o, kind) and o.id == job_id
    )


def tokens_of(script: Script, job_id: int) -> list[int]:
    return [o.token for out in script.sent for o in out if isinstance(o, Token) and o.id == job_id]


def test_running_streams_get_a_token_between_every_two_chunks(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = counting_passes(monkeypatch)  # the prompt lengths of each pass of a group
    # Two short jobs decode (in the batch); a long prompt comes at step 3.
    steps = [[job(0, [1, 2, 3]), job(1, [1, 2, 4])], [], [], [job(2, long_prompt(1), 4)]]
    script, _ = run(loaded, steps)
    started, first = step_of(script, Started, 2), step_of(script, Token, 2)
    between = script.sent[started:first]
    # Forty chunks (the last one short: two tokens are left to feed as it starts), one a step;
    # its first token in the step of the last, taken alone, before it joins the batch.
    assert first - started == LONG // CHUNK - 1
    for out in between:  # each of those steps gave both running jobs a token
        assert {o.id for o in out if isinstance(o, Token)} >= {0, 1}, out
    # BatchGenerator never fed more than a chunk a prompt: the long one was fed apart, and
    # no running stream was padded out to its length.
    assert rows and max(max(r) for r in rows) <= CHUNK, rows
    assert len(tokens_of(script, 2)) == 4


def test_a_long_prompt_alone_does_not_keep_a_short_one_waiting(loaded: tuple[Any, Any]) -> None:
    # Nothing runs when the long prompt comes; a short one comes a step later and decodes
    # (alone, on the solo path) while the long one is still being fed.
    steps = [[job(0, long_prompt(2), 4)], [job(1, [1, 2, 3], 8)]]
    script, _ = run(loaded, steps)
    assert step_of(script, Finished, 1) < step_of(script, Token, 0)
    assert len(tokens_of(script, 0)) == 4 and len(tokens_of(script, 1)) == 8


def test_chunks_give_the_tokens_one_pass_gives(loaded: tuple[Any, Any]) -> None:
    prompt = long_prompt(3)
    chunked, _ = run(loaded, [[job(0, prompt, 12)]])
    whole, _ = run(loaded, [[job(0, prompt, 12)]], chunk=4 * LONG)
    assert tokens_of(chunked, 0) == tokens_of(whole, 0)
    assert len(tokens_of(chunked, 0)) == 12


def test_a_cancel_ends_a_long_prompt_within_a_chunk(loaded: tuple[Any, Any]) -> None:
    steps = [[job(0, [1, 2, 3])], [job(1, long_prompt(4))], [], [], [Cancel(1)]]
    script, scheduler = run(loaded, steps, idle=20)
    # Step 4's messages are received once four steps have been sent: the next step ends it.
    ended = step_of(script, Finished, 1)
    assert ended == 4
    assert (
        next(o for o in script.sent[ended] if isinstance(o, Finished) and o.id == 1).reason
        == "cancelled"
    )
    assert tokens_of(script, 1) == []
    assert not scheduler.prefills and not scheduler.ready
    assert len(tokens_of(script, 0)) > ended  # the running job went on


def test_a_close_is_heard_between_chunks(loaded: tuple[Any, Any]) -> None:
    # The close comes once the job has started: the engine stops with the prompt half fed.
    script, scheduler = run(loaded, [[job(0, long_prompt(5))], [Close()]])
    sent = [o for out in script.sent for o in out]
    assert [type(o) for o in sent] == [Started, Prefilled]  # one chunk, said as it was fed
    assert len(scheduler.prefills[0].rest) > LONG - 3 * CHUNK
    assert sent[1].fed == LONG - len(scheduler.prefills[0].rest) and sent[1].total == LONG


def test_a_slow_step_is_logged_with_what_it_was_doing(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import time

    model, tokenizer = loaded
    calls = 0

    def slow_model(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 10:  # one chunk of the long prompt runs until the watchdog has said so
            deadline = time.monotonic() + 60
            while not any("engine step has run for" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the watchdog never spoke"
                time.sleep(0.01)
        return model(*args, **kwargs)

    # Slow: over 0.5 s, which no other step of this run takes, even on a loaded machine.
    monkeypatch.setattr(watchdog, "SLOW_STEP_S", 0.5)
    monkeypatch.setattr(watchdog, "WATCH_EVERY_S", 0.05)
    scheduler = BatchScheduler(
        slow_model, tokenizer, PrefixCache(model, 0, 0), 8, 0.0, prefill_chunk=CHUNK
    )
    scheduler.batch.model = model  # only the long prompt's own chunks go through slow_model
    script = Script([[job(0, long_prompt(6), 2)], *([[]] * 100), [Close()]])
    with caplog.at_level(logging.WARNING, logger="omni.runtime.chat.scheduler"):
        scheduler.run(script)  # type: ignore[arg-type]
    said = [r.getMessage() for r in caplog.records]
    # While it ran (the watchdog), then once it ended, each said once.
    running = [m for m in said if "engine step has run for" in m]
    assert running == [m for m in said if "feeding job 0's prompt (144 of 640 tokens fed)" in m]
    assert len(running) == 1, said
    ended = [m for m in said if "engine step took" in m]
    assert len(ended) == 1, said
    assert "a chunk of 16 tokens of job 0's prompt (144 of 640 fed)" in ended[0]
    assert said.index(running[0]) < said.index(ended[0])


def test_only_short_prompts_wait_for_company(loaded: tuple[Any, Any]) -> None:
    # While job 0 decodes, jobs come a step apart. Short ones (a group of eight of them is a
    # chunk's work at most) wait to be prefilled together; one of 12 tokens (a group of eight
    # would be three chunks) starts in the step it comes, however long gathering may last.
    short = [1, 2, 3, 4]
    steps = [[job(0, [1, 2, 3])], [], [job(1, short)], [job(2, short)], [], [], []]
    steps += [[job(3, [1, *range(5, 16)])], [], [], []]
    script, _ = run(loaded, steps, chunk=32, gather_s=60.0)
    assert step_of(script, Started, 1) == step_of(script, Started, 2) == 4
    assert step_of(script, Started, 3) == 7


def test_long_prompts_being_fed_count_against_the_batch_size(loaded: tuple[Any, Any]) -> None:
    """Three long prompts and a short job come at once with room for three: the short one
    waits for a place (it does not start alone beside the three being fed)."""
    model, tokenizer = loaded
    scheduler = BatchScheduler(
        model, tokenizer, PrefixCache(model, 0, 0), 3, 0.0, prefill_chunk=CHUNK
    )
    jobs = [job(i, long_prompt(i), 6) for i in range(3)] + [job(3, [1, 2, 3], 6)]
    script = Script([jobs, *([[]] * 300), [Close()]])
    scheduler.run(script)  # type: ignore[arg-type]
    ended = {o.id: k for k, out in enumerate(script.sent) for o in out if isinstance(o, Finished)}
    assert step_of(script, Token, 3) > min(ended[i] for i in range(3))
    assert all(len(tokens_of(script, i)) == 6 for i in range(4))
