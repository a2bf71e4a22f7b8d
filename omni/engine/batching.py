"""Continuous batching on the engine thread with mlx-lm's BatchGenerator.

New jobs join at the next step, finished ones leave; each keeps its own sampler, logits
processors, length limit and stop tokens. Outputs of one step go to the event loop in one
hand-off, not one per token.
"""

from __future__ import annotations

import asyncio
import logging
import queue
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_sampler

from omni.engine.generation import PrefixCache, Scorer, logits_processors
from omni.engine.types import Delta, Failed, Finished, Job, Output, Sampling, Started

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Slot:
    job: Job
    loop: asyncio.AbstractEventLoop
    detokenizer: Any
    fed: list[int]  # prompt, recorded tokens, then each generated token
    cached: int
    done: int
    outputs: list[Output] = field(default_factory=list)


class BatchScheduler:
    """Owns a BatchGenerator; `run` loops until the job queue yields None."""

    def __init__(self, model: Any, tokenizer: Any, cache: PrefixCache, max_batch: int):
        self.model = model
        self.tokenizer = tokenizer
        self.cache = cache
        self.scorer = Scorer(tokenizer)
        self.generations = 0
        eos = sorted(tokenizer.eos_token_ids)
        self.batch = BatchGenerator(
            model,
            stop_tokens=[[t] for t in eos],
            completion_batch_size=max_batch,
            prefill_batch_size=min(8, max_batch),
        )
        self.max_batch = max_batch
        self.slots: dict[int, Slot] = {}
        self.waiting: deque[tuple[Job, asyncio.AbstractEventLoop]] = deque()
        self._samplers: dict[tuple[float, float, float, int], Any] = {}

    def run(self, jobs: queue.Queue[tuple[Job, asyncio.AbstractEventLoop] | None]) -> None:
        while True:
            try:
                item = jobs.get(block=not self.slots and not self.waiting)
                while True:
                    if item is None:
                        return
                    self.waiting.append(item)
                    item = jobs.get_nowait()
            except queue.Empty:
                pass
            # Jobs beyond the batch size wait here, still `queued` (and cancellable as such).
            self._drop_cancelled_waiting()
            while self.waiting and len(self.slots) < self.max_batch:
                job, loop = self.waiting.popleft()
                try:
                    self._admit(job, loop)
                except Exception as exc:  # one bad request must not stop the engine
                    log.exception("could not start a generation")
                    self._deliver(loop, [(job, Failed(f"generation failed: {exc}"))])
            self._cancel_stopped()
            if self.slots:
                try:
                    self._step()
                except Exception as exc:  # errors travel as values; the batch starts over
                    self._fail_all(f"generation failed: {exc}")
            self._hand_over()

    def _drop_cancelled_waiting(self) -> None:
        """A job cancelled while it waited leaves the queue at once (its place frees)."""
        if any(job.stop.is_set() for job, _ in self.waiting):
            for job, loop in [w for w in self.waiting if w[0].stop.is_set()]:
                end = Finished("cancelled", len(job.prompt), len(job.resume_tokens))
                self._deliver(loop, [(job, end)])  # ignored if the service already ended it
            self.waiting = deque(w for w in self.waiting if not w[0].stop.is_set())

    def _admit(self, job: Job, loop: asyncio.AbstractEventLoop) -> None:
        done = len(job.resume_tokens)
        if not job.claim():  # cancelled while queued
            self._deliver(loop, [(job, Finished("cancelled", len(job.prompt), done))])
            return
        s = job.sampling
        fed = job.prompt + job.resume_tokens
        detokenizer = self.tokenizer.detokenizer
        for token in job.resume_tokens:  # rebuild the text state of a resumed generation
            detokenizer.add_token(token)
        detokenizer.offset = len(detokenizer.text)
        remaining = s.max_tokens - done
        if remaining <= 0:
            self._deliver(
                loop, [(job, Started()), (job, Finished("length", len(job.prompt), done))]
            )
            return
        cache, rest = self.cache.nearest(job.cache_namespace, fed)
        (uid,) = self.batch.insert(
            [rest],
            max_tokens=[remaining],
            caches=[cache],
            # What the cache already holds: penalties must see the same history either way.
            all_tokens=[fed[: len(fed) - len(rest)]],
            samplers=[self._sampler(s)],
            logits_processors=[logits_processors(s)],
        )
        self.generations += 1
        slot = Slot(job, loop, detokenizer, fed, len(fed) - len(rest), done)
        slot.outputs.append(Started())
        self.slots[uid] = slot

    def _sampler(self, s: Sampling) -> Any:
        if s.seed is not None and s.temperature > 0:
            return seeded_sampler(s)  # its own random stream: the batch does not change it
        key = (s.temperature, s.top_p, s.min_p, s.top_k)
        if key not in self._samplers:  # one shared sampler = one batched sampling call
            self._samplers[key] = make_sampler(
                temp=s.temperature, top_p=s.top_p, min_p=s.min_p, top_k=s.top_k
            )
        return self._samplers[key]

    def _step(self) -> None:
        for r in self.batch.next_generated():
            slot = self.slots[r.uid]
            s = slot.job.sampling
            if r.finish_reason == "stop":  # an end-of-sequence token: not output
                self._finish(r.uid, "stop", r.prompt_cache)
                continue
            token = int(r.token)
            slot.fed.append(token)
            slot.done += 1
            slot.detokenizer.add_token(token)
            scored = None if s.logprobs is None else self.scorer(token, r.logprobs, s.logprobs)
            slot.outputs.append(Delta(slot.detokenizer.last_segment, token, scored))
            if r.finish_reason == "length":
                self._finish(r.uid, "length", r.prompt_cache)

    def _cancel_stopped(self) -> None:
        stopped = [uid for uid, slot in self.slots.items() if slot.job.stop.is_set()]
        if not stopped:
            return
        caches = self.batch.remove(stopped, return_prompt_caches=True)
        for uid in stopped:
            cache = caches.get(uid, (None,))[0]
            self._finish(uid, "cancelled", cache)

    def _finish(self, uid: int, reason: str, cache: list[Any] | None) -> None:
        slot = self.slots.pop(uid)
        if cache is not None:
            self.cache.insert(slot.job.cache_namespace, slot.fed, cache)
        slot.detokenizer.finalize()
        if tail := slot.detokenizer.last_segment:
            slot.outputs.append(Delta(tail, None))
        end = Finished(reason, len(slot.job.prompt), slot.done, slot.cached)  # type: ignore[arg-type]
        slot.outputs.append(end)
        self._deliver(slot.loop, [(slot.job, out) for out in slot.outputs])
        slot.outputs = []

    def _fail_all(self, message: str) -> None:
        for uid, slot in list(self.slots.items()):
            self.batch.remove([uid])
            self.slots.pop(uid)
            outputs = [*slot.outputs, Failed(message)]
            self._deliver(slot.loop, [(slot.job, out) for out in outputs])

    def _hand_over(self) -> None:
        """One hand-off per event loop per step, whatever the batch size."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Job, Output]]] = defaultdict(list)
        for slot in self.slots.values():
            if slot.outputs:
                by_loop[slot.loop] += [(slot.job, out) for out in slot.outputs]
                slot.outputs = []
        for loop, items in by_loop.items():
            self._deliver(loop, items)

    @staticmethod
    def _deliver(loop: asyncio.AbstractEventLoop, items: list[tuple[Job, Output]]) -> None:
        def put() -> None:
            for job, out in items:
                job.outputs.put_nowait(out)

        try:
            loop.call_soon_threadsafe(put)
        except RuntimeError:  # that event loop is closed: nobody is left to read it
            pass


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
