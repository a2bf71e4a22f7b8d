"""Speculative decoding: with a draft model, jobs are decoded one at a time, each alone through
mlx-lm's speculative_generate_step (as mlx-lm's server does: it batches none of them); the
others wait, queued (Admission._schedule_speculative). A cancel is heard between tokens, not
inside the prompt."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import mlx.core as mx
from mlx_lm.generate import speculative_generate_step

from omni.runtime.chat.sampling import with_history
from omni.runtime.chat.state import SchedulerState, Slot


def speculative_steps(
    state: SchedulerState, slot: Slot, cache: list[Any], rest: list[int], held: mx.array
) -> Generator[tuple[Any, Any], None, None]:
    """A job's tokens and log probabilities, as generate_step yields them: `rest` fed on
    `cache` (both models' caches, which hold `held`)."""
    s = slot.spec.sampling
    steps = speculative_generate_step(
        mx.array(rest),
        state.model,
        state.draft,
        num_draft_tokens=state.num_draft,
        max_tokens=s.max_tokens - slot.done,
        sampler=state.samplers(s),
        logits_processors=[with_history(p, held) for p in slot.processors],
        prompt_cache=cache,
        prefill_step_size=state.chunk,
    )
    try:
        for token, logprobs, _drafted in steps:
            yield token, logprobs
    finally:
        steps.close()
