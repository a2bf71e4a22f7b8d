"""The solo path: a job that arrives while nothing else runs is decoded alone with mlx-lm's
`generate_step` (a plain KV cache, no batch masks: about twice BatchGenerator's speed at batch
1); when another job arrives, it moves into the batch with its KV cache and carries on there.
With a draft model every job is decoded so, speculatively (omni.runtime.chat.speculative)."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

from omni.ports.jobs import FinishReason
from omni.runtime.chat.pipe import Stopped
from omni.runtime.chat.prefill import Prefilling
from omni.runtime.chat.sampling import with_history
from omni.runtime.chat.speculative import speculative_steps
from omni.runtime.chat.state import FEED_AT_LEAST, Solo, Start, solo_ok


class SoloPath(Prefilling):
    """The job decoded alone, and its move into the batch."""

    def _start_solo(self, start: Start) -> None:
        slot, cache, rest, spec = start.slot, start.cache, start.rest, start.slot.spec
        s = spec.sampling
        held = mx.array(slot.fed[: len(slot.fed) - len(rest)])  # all the cache holds
        if self.draft is not None:
            steps = speculative_steps(self, slot, cache, rest, held)
            self.solo = Solo(slot, cache, steps)
            self._started(start)
            return
        steps = generate_step(
            mx.array(rest),
            self.model,
            max_tokens=s.max_tokens - slot.done,
            sampler=self.samplers(s),
            # generate_step shows processors only the tokens it was given: add what the cache holds.
            logits_processors=[with_history(p, held) for p in slot.processors],
            prompt_cache=cache,
            # Never more than a chunk (a longer prompt was fed before); a cancel is heard.
            prefill_step_size=self.chunk,
            prompt_progress_callback=lambda done, total: self._heard_stop(spec.id),
        )
        self.solo = Solo(slot, cache, steps)
        self._started(start)

    def _solo_step(self, solo: Solo) -> None:
        slot = solo.slot
        try:
            y, logprobs = next(solo.steps)
        except StopIteration:  # max_tokens reached
            self._end_solo("length")
            return
        except Stopped:  # cancelled (or closing) during the prompt
            self._end_solo()
            return
        token = int(y.item() if hasattr(y, "item") else y)
        if (reason := self._emit(slot, token, logprobs)) is not None:
            self._end_solo(reason, token if reason == "stop" else None)

    def _lead(self, start: Start) -> None:
        """A job fed apart (a long prompt) joins the batch after its first token, which it
        takes alone from its own cache (a step of the solo path): not after a prefill pass in
        BatchGenerator and the two steps it takes to move a prompt to decoding. A seeded job
        joins as it is (its random stream must not depend on how it started)."""
        if not solo_ok(start.slot.spec) or self.solo is not None:
            self._admit(start)
            return
        self._start_solo(start)
        try:
            self._solo_step(self.solo)  # type: ignore[arg-type]
            if self.solo is not None:
                self._end_solo()  # on into the batch, from its cache
        finally:
            self.solo = None

    def _end_solo(self, reason: FinishReason | None = None, eos: int | None = None) -> None:
        """Finish the solo job (`reason`; `eos`: the end token it stopped on), or, when
        cancelled or joined by others, stop it here and carry on in the batch from its KV cache
        (cancelled: the batch ends it)."""
        solo, self.solo = self.solo, None
        assert solo is not None
        slot, cache = solo.slot, solo.cache
        solo.steps.close()
        mx.eval([c.state for c in cache])
        if reason is not None or slot.spec.id in self.stopping or self._closing:
            if reason is None:
                self.stopping.discard(slot.spec.id)
            if self.draft is None:  # (a draft's caches are not the prefix cache's kind)
                self._keep(slot, cache, eos)  # generate_step fed the end token too
            self.out.append(self._finished(slot, reason or "cancelled"))
            return
        # The batch must see a token to predict the next: hand it the last ones again (the
        # cache holds every token so far: generate_step feeds each one it yields). It is fed
        # them with the short prompts it joins (FEED_AT_LEAST: one token alone would split
        # every prefill group after it), never with a long one: those are fed apart.
        if can_trim_prompt_cache(cache):
            back = min(FEED_AT_LEAST, len(slot.fed))  # the cache holds all of slot.fed
            trim_prompt_cache(cache, back)
            self._join(Start(slot, cache, slot.fed[len(slot.fed) - back :], told=True))
            return
        # A cache that cannot be cut back (a sliding window past its size, a recurrent
        # state): it starts again from the longest cached prefix of what it has seen, fed a
        # chunk a step if that is long.
        cache, rest = self.cache.nearest(slot.spec.cache_namespace, slot.fed, FEED_AT_LEAST)
        start = Start(slot, cache, rest, told=True)
        if self._long(len(rest)):
            self.prefills.append(start)
        else:
            self._join(start)

    def _join(self, start: Start) -> None:
        """A job that was decoded alone goes on in the batch: fed with this step's group."""
        if self.first_from_prefill:
            self.group.append(start)
        else:
            self._insert(start.slot, start.cache, start.rest)
