"""How a job picks its tokens in the engine process: its sampler (one shared by every job that
samples alike: one batched sampling call), or a seeded one with a random stream of its own, and
what processes its logits first (penalties and bias, a thinking budget, a grammar)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    make_logits_processors,
    make_sampler,
)

from omni.ports.jobs import Sampling
from omni.runtime.chat.wire import Spec


class Samplers:
    """Each job's sampler: shared by the jobs that sample alike, or seeded, its own."""

    def __init__(self) -> None:
        self._shared: dict[tuple[float, float, float, int], Any] = {}

    def __call__(self, s: Sampling) -> Any:
        if s.seed is not None and s.temperature > 0:
            return seeded_sampler(s)  # its own random stream: the batch does not change it
        key = (s.temperature, s.top_p, s.min_p, s.top_k)
        if key not in self._shared:  # one shared sampler = one batched sampling call
            self._shared[key] = make_sampler(
                temp=s.temperature, top_p=s.top_p, min_p=s.min_p, top_k=s.top_k
            )
        return self._shared[key]


class Processors:
    """A job's logits processors, built once for it (a grammar's state must survive a move into
    the batch): penalties and bias, a thinking budget, a grammar. The grammars' compiler
    (omni.runtime.chat.constraints) is built on first use."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._constraints: Any = None

    def __call__(self, spec: Spec) -> list[Any]:
        processors = logits_processors(spec.sampling)
        budget = spec.sampling.thinking_budget
        start: tuple[int, ...] = self.tokenizer.think_start_tokens or ()
        end: tuple[int, ...] = self.tokenizer.think_end_tokens or ()
        if budget is not None and len(start) == 1 and len(end) == 1:
            processors.append(ThinkBudget(start[0], end[0], budget))
        if spec.constraint is not None:
            if self._constraints is None:
                from omni.runtime.chat.constraints import Constraints

                self._constraints = Constraints(self.tokenizer)
            processors.append(self._constraints.processor(spec.constraint, spec.resume_tokens))
        return processors


def logits_processors(s: Sampling) -> list[Any]:
    processors: list[Any] = make_logits_processors(
        logit_bias=dict(s.logit_bias) or None,
        repetition_penalty=s.repetition_penalty,
        presence_penalty=s.presence_penalty,
        frequency_penalty=s.frequency_penalty,
    )
    return processors


def seeded_sampler(s: Sampling) -> Callable[[mx.array], mx.array]:
    """Sampling with a random stream of its own, derived from the request's seed."""
    key = mx.random.key((s.seed or 0) % (1 << 63))  # any integer seed, negative too

    def sample(logprobs: mx.array) -> mx.array:
        nonlocal key
        key, sub = mx.random.split(key)
        if 0 < s.top_p < 1:
            logprobs = apply_top_p(logprobs, s.top_p)
        if s.min_p:
            logprobs = apply_min_p(logprobs, s.min_p)
        if s.top_k:
            logprobs = apply_top_k(logprobs, s.top_k)
        return mx.random.categorical(logprobs * (1.0 / s.temperature), key=sub)

    return sample


def with_history(processor: Any, held: mx.array) -> Any:
    """`processor` shown `held` (what a KV cache holds) before the tokens it is given: mlx-lm's
    generate_step shows processors only the tokens it was handed."""
    if held.size == 0:
        return processor

    def process(tokens: mx.array, logits: mx.array) -> mx.array:
        out: mx.array = processor(mx.concatenate([held, tokens]), logits)
        return out

    return process


class ThinkBudget:
    """At `budget` tokens inside the think block, the block's end is forced: the model stops
    reasoning and answers. mlx-lm's processor signature; single-token markers only."""

    def __init__(self, start: int, end: int, budget: int):
        self.start, self.end, self.budget = start, end, budget
        self._seen: int | None = None
        self._inside = False
        self._count = 0

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._seen is None:  # the prompt: did the template open the block?
            history: list[int] = tokens.tolist()  # type: ignore[assignment]
            opened = max((i for i, t in enumerate(history) if t == self.start), default=-1)
            closed = max((i for i, t in enumerate(history) if t == self.end), default=-1)
            self._inside = opened > closed
        else:
            new: list[int] = tokens[self._seen :].tolist()  # type: ignore[assignment]
            for token in new:
                if token == self.start:
                    self._inside, self._count = True, 0
                elif token == self.end:
                    self._inside = False
                elif self._inside:
                    self._count += 1
        self._seen = tokens.size
        if self._inside and self._count >= self.budget:
            mask = mx.full(logits.shape, -mx.inf, dtype=logits.dtype)
            return mx.where(mx.arange(logits.shape[-1]) == self.end, logits, mask)
        return logits
