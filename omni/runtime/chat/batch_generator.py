"""mlx-lm's BatchGenerator as the scheduler uses it: its calls typed, and the only place that
reads its private members. Why it reads them at all: the scheduler must know which prompts
BatchGenerator is prefilling (to hand it full prefill groups, and for the watchdog's words),
and a group fed by the scheduler's own pass (omni.runtime.chat.first_tokens) joins its decoding
the way its own groups do. Written against mlx-lm 0.32; `joins` says whether this mlx-lm has
what joining needs (without it the scheduler hands BatchGenerator prompts whole)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, GenerationBatch

# What join() needs of a BatchGenerator beyond its public API.
_PRIVATE = ("_generation_batch", "_uid_count", "_default_stop_sequences")


# Its methods are unannotated: each is typed here, once, as the callable it is.


def make(model: Any, eos: list[int], max_batch: int, group: int, chunk: int) -> BatchGenerator:
    """The scheduler's BatchGenerator: `max_batch` jobs decoding at most, prefilled `group` at
    a time, each ending at any of the `eos` tokens."""
    return BatchGenerator(
        model,
        stop_tokens=[[t] for t in eos],
        completion_batch_size=max_batch,
        prefill_batch_size=min(group, max_batch),
        # What it is given is a chunk at most (longer prompts are fed apart, see
        # Admission._take_long): a step of it, next_generated, feeds at most one chunk a prompt.
        prefill_step_size=chunk,
    )


def joins(batch: BatchGenerator) -> bool:
    """Whether `batch` (this mlx-lm's BatchGenerator) can take a group fed apart."""
    return all(hasattr(batch, name) for name in _PRIVATE)


def prefilling(batch: BatchGenerator) -> list[Any]:
    """The prompts `batch` is prefilling now (its private list; test_gather fails if it goes:
    groups split again, no error)."""
    return list(getattr(batch, "_currently_processing", None) or ())


def finishing(processing: list[Any]) -> int:
    """How many of the prompts being prefilled are done but for their last token (mlx-lm's own
    test, in mlx_lm.generate's _next): they move to decoding in the next step."""
    return sum(len(s[0]) == 1 and len(s[0][0]) == 1 for s in processing)


def next_generated(batch: BatchGenerator) -> list[Any]:
    """One step of `batch`: its responses (a token, or a finish, for each job decoding)."""
    step: Callable[[], list[Any]] = batch.next_generated
    return step()


def remove(batch: BatchGenerator, uids: list[int], caches: bool = False) -> dict[int, Any]:
    """Take jobs `uids` out of `batch`; with `caches`, their KV caches by uid."""
    remove: Callable[..., dict[int, Any] | None] = batch.remove
    return remove(uids, return_prompt_caches=caches) or {}


def join(
    batch: BatchGenerator,
    model: Any,
    tokens: list[int],
    cache: list[Any],
    rows: list[tuple[list[int], Any, list[Any]]],
    max_tokens: list[int],
) -> list[int]:
    """A group whose first `tokens` were sampled apart joins `batch`'s decoding, its KV `cache`
    as its prefill left it; each row: the tokens the model has seen, its sampler and its
    logits processors. Their uids in `batch`."""
    uids = list(range(batch._uid_count, batch._uid_count + len(tokens)))
    batch._uid_count += len(tokens)
    group = GenerationBatch(
        model,
        uids,
        mx.array(tokens),
        cache,
        [history for history, _, _ in rows],
        [sampler for _, sampler, _ in rows],
        batch.sampler,
        [processors for _, _, processors in rows],
        [batch._default_stop_sequences] * len(tokens),
        max_tokens,
    )
    batch._generation_batch.extend(group)
    return uids
