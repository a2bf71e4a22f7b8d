"""A group of short prompts fed in one forward pass that also gives each its first token.

mlx-lm's BatchGenerator feeds a new group all but its prompts' last tokens, then starts decoding
from those last tokens: the group's first tokens come out a decode step (and that step's graph
building) after its prefill, and the clients wait for both. Fed whole here, the prefill's logits
at each prompt's end give its first token at once. The group then joins the running batch as
BatchGenerator's own groups do after that extra step, its cache as the pass left it (nothing is
copied or fed twice).

Joining uses three of BatchGenerator's private members (omni.runtime.chat.batch_generator says
whether this mlx-lm has them; without them the scheduler hands prompts to BatchGenerator whole).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.generate import BatchGenerator

from omni.runtime.chat import batch_generator


@dataclass(frozen=True, slots=True)
class Row:
    """One prompt of the group: the tokens still to feed (at least one), its KV cache so far
    (a prefix reused, or empty), every token the model will have seen before its first new one
    (what logits processors are shown), how it samples and what processes its logits."""

    rest: list[int]
    cache: list[Any]
    history: list[int]
    sampler: Any
    processors: list[Any]


@dataclass(frozen=True, slots=True)
class Fed:
    """The group after its pass: each row's first token and log probabilities, and the group's
    batch KV cache (rows in the group's order, holding every row's history)."""

    tokens: list[int]
    logprobs: list[mx.array]
    cache: list[Any]


def feed(model: Any, rows: list[Row]) -> Fed:
    """Feed every row's rest in one pass (right-padded to the longest, as mlx-lm pads a prefill
    group) and sample each row's first token from the logits at its own last token."""
    lengths = [len(r.rest) for r in rows]
    width = max(lengths)
    padding = [width - n for n in lengths]
    cache = [layer[0].merge(list(layer)) for layer in zip(*(r.cache for r in rows), strict=True)]
    padded = any(padding)
    if padded:
        for c in cache:
            c.prepare(lengths=lengths, right_padding=padding)
    logits = model(mx.array([r.rest + [0] * (width - len(r.rest)) for r in rows]), cache=cache)
    if padded:  # the padding moves to the left, where the batch's caches keep theirs
        for c in cache:
            c.finalize()
    last = logits[mx.arange(len(rows)), mx.array(lengths) - 1]
    tokens, logprobs = _sample(last, rows)
    mx.eval(tokens, logprobs, [c.state for c in cache])
    first: list[int] = tokens.tolist()  # type: ignore[assignment]
    return Fed(first, list(logprobs), cache)


def _sample(logits: mx.array, rows: list[Row]) -> tuple[mx.array, mx.array]:
    """As a decode step of mlx-lm's GenerationBatch samples: each row's processors, then
    log probabilities, then one sampling call when the rows share a sampler."""
    if any(r.processors for r in rows):
        processed = []
        for i, r in enumerate(rows):
            row = logits[i : i + 1]
            if r.processors:
                seen = mx.array(r.history)
                for processor in r.processors:
                    row = processor(seen, row)
            processed.append(row)
        logits = mx.concatenate(processed, axis=0)
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    first = rows[0].sampler
    if all(r.sampler is first for r in rows):
        return first(logprobs), logprobs
    sampled = [r.sampler(logprobs[i : i + 1]) for i, r in enumerate(rows)]
    return mx.concatenate(sampled, axis=0), logprobs


def join(
    batch: BatchGenerator,
    model: Any,
    fed: Fed,
    rows: list[Row],
    keep: list[int],
    max_tokens: list[int],
) -> list[int]:
    """Rows `keep` of a fed group join `batch`'s decoding from their first tokens (each with
    `max_tokens` more to generate at most); their uids in `batch`. The other rows' caches must
    have been taken out first (they are dropped here)."""
    cache = fed.cache
    if len(keep) < len(rows):
        for c in cache:
            c.filter(keep)
    kept = [(list(rows[i].history), rows[i].sampler, rows[i].processors) for i in keep]
    tokens = [fed.tokens[i] for i in keep]
    return batch_generator.join(batch, model, tokens, cache, kept, max_tokens)
