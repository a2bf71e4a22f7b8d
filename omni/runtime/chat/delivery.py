"""The engine's outputs on their way to the event loops that asked: each job's wire outputs
turned into its own (text detokenized here, in the server process), a big batch's tokens held
back a little, and one hand-off per event loop for all of them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final

from omni.ports.jobs import Delta, Finished, Job, Output
from omni.runtime.chat import wire

# A big batch's tokens are handed to the event loop a few steps at a time: the loop's work for
# a stream (its recorder's append, the commit, the follower's wake-up, the SSE write) is paid
# once for the tokens of several steps. Only for steps of HOLD_MIN outputs or more (a small
# batch costs the loop little), never for longer than HOLD_S, and never for a job's first
# token, its start or its end, which go at once (time to first token is not held up).
HOLD_MIN: Final = 16
HOLD_S: Final = 0.015


@dataclass(eq=False, slots=True)
class Pending:
    """A job submitted to the engine and not yet ended."""

    job: Job
    loop: asyncio.AbstractEventLoop
    detokenizer: Any
    started: bool = False
    spoke: bool = False  # its first text went out (the reader thread's alone)


def pending(job: Job, loop: asyncio.AbstractEventLoop, tokenizer: Any) -> Pending:
    """A job just submitted, its detokenizer holding the text of the tokens it generated before
    (a resumed generation), which it does not deliver again."""
    detokenizer = tokenizer.detokenizer
    for token in job.resume_tokens:  # rebuild the text state of a resumed generation
        detokenizer.add_token(token)
    detokenizer.offset = len(detokenizer.text)
    return Pending(job, loop, detokenizer)


def delta(pending: Pending, output: wire.Token) -> Delta:
    """A token as its job's text: what it adds to the detokenizer's text."""
    pending.detokenizer.add_token(output.token)
    text = pending.detokenizer.last_segment
    pending.spoke = pending.spoke or bool(text)  # "": half a character, say
    return Delta(text, output.token, output.logprobs)


def finished(pending: Pending, output: wire.Finished) -> list[Output]:
    """A job's end: the text its detokenizer still held, then its Finished."""
    pending.detokenizer.finalize()
    ended = Finished(
        output.reason,
        output.prompt_tokens,
        output.completion_tokens,
        output.cached_tokens,
        output.disk_tokens,
        output.cache_bytes,
    )
    if tail := pending.detokenizer.last_segment:
        return [Delta(tail, None), ended]
    return [ended]


def urgent(outputs: list[wire.Output], pending: dict[int, Pending]) -> set[int]:
    """The jobs whose outputs go at once: a start, an end, tokens until the first text."""
    ids = set()
    for o in outputs:
        if not isinstance(o, wire.Token):
            ids.add(o.id)
        elif (p := pending.get(o.id)) is not None and not p.spoke:
            ids.add(o.id)
    return ids


def hand_off(by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Job, Output]]]) -> None:
    """Each event loop's outputs put on their jobs' queues, in one call on that loop."""
    for loop, items in by_loop.items():
        if not items:
            continue

        def put(items: list[tuple[Job, Output]] = items) -> None:
            for job, out in items:
                job.outputs.put_nowait(out)

        try:
            loop.call_soon_threadsafe(put)
        except RuntimeError:  # that event loop is closed: nobody is left to read it
            pass
