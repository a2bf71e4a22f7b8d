"""Admission: jobs taken off the queue and started, alone or in the batch (or held a step,
omni.runtime.chat.gathering), long prompts sent to the chunked prefill, cancelled jobs dropped
while they wait. Jobs beyond the batch size stay queued, cancellable as such."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from mlx_lm.models.cache import make_prompt_cache

from omni.runtime.chat.gathering import Gathering
from omni.runtime.chat.state import (
    FEED_AT_LEAST,
    GENERATION_FAILED,
    Slot,
    Start,
    fed_at_most,
    solo_ok,
)
from omni.runtime.chat.wire import Failed, Finished, Spec, Started

log = logging.getLogger(__name__)


class Admission(Gathering):
    """Jobs taken off the queue and started, or held."""

    def _schedule(self, now: float, arrived: int) -> bool:
        """Take jobs off the queue and start them (alone, or in the batch) or hold them;
        whether some were handed to the batch. `arrived`: jobs received since the last step."""
        # Jobs beyond the batch size wait here, still queued (and cancellable as such).
        self._drop_cancelled()
        if self.draft is not None:
            self._schedule_speculative()
            return False
        self._take_long()
        expecting = self._expecting(now)
        hold = expecting or self._gathering(now, arrived)
        startable = len(self.ready) + len(self.waiting)
        if self.solo is not None and (
            (startable and not hold) or self.solo.slot.spec.id in self.stopping
        ):
            self._end_solo()
        if (
            startable == 1
            and not (self.slots or self.group)
            and self.solo is None
            and not expecting
            and len(self.prefills) < self.max_batch  # long prompts being fed count too
        ):
            self._start_alone()
        grouped = bool(
            (self.ready or self.waiting)
            and not hold
            and len(self.slots) + len(self.group) < self.max_batch
            and self._groups_align()
        )
        if grouped:
            self._hand_to_batch()
        self._cancel_stopped()
        return grouped

    def _start_alone(self) -> None:
        """The one job to start, with nothing else running, on the solo path (unless seeded)."""
        if self.ready and solo_ok(self.ready[0].slot.spec):
            self._begin(self._start_solo, self.ready.popleft())
        elif self.waiting and solo_ok(self.waiting[0]):
            self._begin_spec(self._start_solo, self.waiting.popleft())

    def _hand_to_batch(self) -> None:
        """Jobs join the batch: this step's group, or (an mlx-lm that cannot take a group fed
        apart) each handed to BatchGenerator."""
        if self.first_from_prefill:
            self._take_group()
            return
        while self.ready and len(self.slots) < self.max_batch:
            self._begin(self._lead, self.ready.popleft())
        while self.waiting and len(self.slots) + len(self.prefills) < self.max_batch:
            self._begin_spec(self._admit, self.waiting.popleft())

    def _take_group(self, waiting: bool = True) -> None:
        """A prefill group's worth of prompts to feed in this step (_feed_group): long ones
        fed but for their last tokens first, then (`waiting`) short ones off the queue. The
        rest wait for the next step's group, as BatchGenerator would feed them a group a step.
        A job that was decoded alone and joins the batch (_join) is fed with them, over."""
        room = self.max_batch - len(self.slots) - len(self.prefills) - len(self.group)
        room = min(room, self.batch.prefill_batch_size)
        while self.ready and room > 0:
            self.group.append(self.ready.popleft())
            room -= 1
        while waiting and self.waiting and room > 0:
            if (start := self._taken(self.waiting.popleft())) is None:
                continue
            room -= 1
            if self._long(len(start.rest)):  # (room freed since _take_long: a chunk a step)
                self._started(start)
                self.prefills.append(start)
            elif not start.rest:  # nothing to feed (an empty prompt): nothing to predict from
                self.out.append(Failed(start.id, GENERATION_FAILED))
            else:
                self.group.append(start)

    def _schedule_speculative(self) -> None:
        """With a draft model, jobs are decoded one at a time, each alone through mlx-lm's
        speculative_generate_step (as mlx-lm's server does: it batches none of them); the
        others wait, queued. A cancel is heard between tokens (not inside the prompt)."""
        if self.solo is not None and self.solo.slot.spec.id in self.stopping:
            self._end_solo()
        if self.solo is None and self.waiting:
            self._begin_spec(self._start_solo, self.waiting.popleft())
        self._cancel_stopped()

    def _begin(self, begin: Callable[[Start], None], start: Start) -> None:
        """Start a job (alone or in the batch); one that cannot start fails, the engine goes on."""
        try:
            begin(start)
        except Exception:  # one bad request must not stop the engine
            self._step_failed("could not start a generation")
            self.out.append(Failed(start.id, GENERATION_FAILED))

    def _begin_spec(self, begin: Callable[[Start], None], spec: Spec) -> None:
        """Take a job off the queue and start it."""
        if (start := self._taken(spec)) is not None:
            self._begin(begin, start)

    def _taken(self, spec: Spec) -> Start | None:
        """A job taken off the queue; None if it had nothing to do (it is ended) or could not
        start (it failed, the engine goes on)."""
        try:
            return self._slot(spec)
        except Exception:  # one bad request must not stop the engine (no model call ran:
            log.exception("could not start a generation")  # every rank fails it alike)
            self.out.append(Failed(spec.id, GENERATION_FAILED))
            return None

    def _take_long(self) -> None:
        """Long queued jobs leave the queue for the prefill, where none waits for a group and
        a chunk a step is fed (one whose prefix is cached may turn out short: it starts apart
        all the same). A running job counts against the batch size."""
        if not self.waiting or not any(self._long(fed_at_most(w)) for w in self.waiting):
            return
        kept: deque[Spec] = deque()
        for spec in self.waiting:
            running = len(self.slots) + (self.solo is not None) + len(self.prefills)
            running += len(self.group)
            if not self._long(fed_at_most(spec)) or running + len(self.ready) >= self.max_batch:
                kept.append(spec)
                continue
            if (start := self._taken(spec)) is None:
                continue
            self._started(start)
            (self.prefills if self._long(len(start.rest)) else self.ready).append(start)
        self.waiting = kept

    def _drop_cancelled(self) -> None:
        """A job cancelled while it waited, or while its prompt is fed, leaves at once (its
        place frees): within one chunk of a long prompt."""
        if not self.stopping:
            return
        stopping = self.stopping
        for spec in [w for w in self.waiting if w.id in stopping]:
            done = len(spec.resume_tokens)
            self.out.append(Finished(spec.id, "cancelled", len(spec.prompt), done))
        self.waiting = deque(w for w in self.waiting if w.id not in stopping)
        for queue in (self.prefills, self.ready):
            for start in [s for s in queue if s.id in stopping]:
                spec, done = start.slot.spec, start.slot.done
                self.out.append(Finished(spec.id, "cancelled", len(spec.prompt), done))
            kept = [s for s in queue if s.id not in stopping]
            queue.clear()
            queue.extend(kept)
        # Those still running stay, for _cancel_stopped or _end_solo.
        running = {slot.spec.id for slot in self.slots.values()}
        if self.solo is not None:
            running.add(self.solo.slot.spec.id)
        self.stopping = stopping & running

    def _out_of_tokens(self, spec: Spec) -> bool:
        done = len(spec.resume_tokens)
        if spec.sampling.max_tokens > done:
            return False
        self.out.append(Started(spec.id, False))
        self.out.append(Finished(spec.id, "length", len(spec.prompt), done))
        return True

    def _slot(self, spec: Spec) -> Start | None:
        """The job's slot, the KV cache of its longest cached prefix and the tokens still to
        feed; None if it has no tokens left to generate (then it is already ended)."""
        if self._out_of_tokens(spec):
            return None
        fed = spec.prompt + spec.resume_tokens
        from_disk = 0
        if self.draft is not None:  # the two models' caches, fresh (the prefix cache: neither)
            cache, rest = make_prompt_cache(self.model) + make_prompt_cache(self.draft), fed
        else:
            cache, rest = self.cache.nearest(spec.cache_namespace, fed, FEED_AT_LEAST)
            from_disk = self.cache.from_disk
        cached, done = len(fed) - len(rest), len(spec.resume_tokens)
        slot = Slot(spec, fed, cached, done, self.processors(spec), from_disk)
        return Start(slot, cache, rest)
