"""The batch's side of the scheduler: jobs handed to mlx-lm's BatchGenerator, its decode step
and its outputs, and jobs leaving it (ended, cancelled, or failed with the step)."""

from __future__ import annotations

from typing import Any

from omni.ports.jobs import FinishReason
from omni.runtime.chat import batch_generator
from omni.runtime.chat.pipe import Pipe
from omni.runtime.chat.state import Slot, Start
from omni.runtime.chat.wire import Failed, Token


class Decoding(Pipe):
    """Jobs in BatchGenerator: handed to it, decoded a step, taken out."""

    def _admit(self, start: Start) -> None:
        self._insert(start.slot, start.cache, start.rest)
        self._started(start)

    def _insert(self, slot: Slot, cache: list[Any], rest: list[int]) -> None:
        s = slot.spec.sampling
        (uid,) = self.batch.insert(
            [rest],
            max_tokens=[s.max_tokens - slot.done],
            caches=[cache],
            # What the cache already holds: penalties must see the same history either way.
            all_tokens=[slot.fed[: len(slot.fed) - len(rest)]],
            samplers=[self.samplers(s)],
            logits_processors=[slot.processors],
        )
        self.slots[uid] = slot

    def _step(self) -> None:
        out = self.out
        if self.observer.times_prefill:
            with self.batch.stats() as step:
                generated = batch_generator.next_generated(self.batch)
            self.observer.on_prefill(step.prompt_time, step.prompt_tokens, chunk=False)
        else:
            generated = batch_generator.next_generated(self.batch)
        for r in generated:
            slot = self.slots[r.uid]
            if r.finish_reason == "stop":  # an end-of-sequence token: not output
                self._finish(r.uid, "stop", r.prompt_cache, int(r.token))
                continue
            token = int(r.token)
            slot.fed.append(token)
            slot.done += 1
            k = slot.spec.sampling.logprobs
            out.append(
                Token(slot.spec.id, token, None if k is None else self.scorer(token, r.logprobs, k))
            )
            if r.finish_reason == "length":
                self._finish(r.uid, "length", r.prompt_cache)

    def _cancel_stopped(self) -> None:
        if not self.stopping:
            return
        stopped = [uid for uid, slot in self.slots.items() if slot.spec.id in self.stopping]
        # Ids of jobs that already ended (or are still waiting) are not in a slot.
        self.stopping = {i for i in self.stopping if any(w.id == i for w in self.waiting)}
        if not stopped:
            return
        caches = batch_generator.remove(self.batch, stopped, caches=True)
        for uid in stopped:
            cache = caches.get(uid, (None,))[0]
            self._finish(uid, "cancelled", cache)

    def _finish(
        self, uid: int, reason: FinishReason, cache: list[Any] | None, eos: int | None = None
    ) -> None:
        """`eos`: the end token it stopped on, which the batch fed (its cache holds it)."""
        slot = self.slots.pop(uid)
        if cache is not None:
            self._keep(slot, cache, eos)
        self.out.append(self._finished(slot, reason))

    def _fail_all(self, message: str) -> None:
        for uid, slot in list(self.slots.items()):
            batch_generator.remove(self.batch, [uid])
            self.slots.pop(uid)
            self.out.append(Failed(slot.spec.id, message))
