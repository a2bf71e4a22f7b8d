"""Continuous batching in the engine process with mlx-lm's BatchGenerator.

New jobs join at the next step, finished ones leave; each keeps its own sampler, logits
processors, length limit and stop tokens. A job that arrives while nothing else runs is decoded
alone with mlx-lm's `generate_step` (a plain KV cache, no batch masks: about twice
BatchGenerator's speed at batch 1); when another job arrives, it moves into the batch with its
KV cache and carries on there. The outputs of one step leave in one message to the
server process (omni.runtime.mlx_engine), which detokenizes them: this process does nothing but
decode, so the server's Python work never holds up a step.

A long prompt (more than one chunk of tokens to feed) is prefilled here, one chunk a step on a
KV cache of its own, with a decode step of the running streams between two chunks: it holds them
for one chunk at most, nobody is padded out to its length, and a cancel or a close is heard
between chunks. Once only its last tokens are left it joins the others like a short prompt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Final

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, generate_step, speculative_generate_step
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_sampler

from omni.jobs import FinishReason, Sampling
from omni.runtime import first_tokens
from omni.runtime.generation import PrefixCache, Scorer, ThinkBudget, logits_processors
from omni.runtime.observe import QUIET, Observer
from omni.runtime.wire import (
    Cancel,
    Close,
    Failed,
    Finished,
    MaxBatch,
    Output,
    Spec,
    Started,
    Token,
)
from omni.settings import EngineSettings

log = logging.getLogger(__name__)

# A failed job's message, which clients read: the exception's text goes to the log only.
GENERATION_FAILED: Final = "generation failed: the engine had an error (see the server's log)"

PREFILL_GROUP: Final = 8  # prompts prefilled together by default (mlx-lm's prefill batch)
PREFILL_CHUNK: Final = 512  # prompt tokens a step feeds one prompt by default (worker: per device)
# A step that takes this many times the usual (and this long at least) is logged with what it
# was doing: a stall shows in the log while it happens, not only as clients' silence.
SLOW_STEP_FACTOR: Final = 20
SLOW_STEP_S: Final = 2.0
WATCH_EVERY_S: Final = 0.5  # how often the watchdog looks at the step in progress
# Tokens a job hands BatchGenerator at least, even when its cache holds all but the last one.
# A job of one token goes to decoding at once, yet it has taken a place in a prefill group:
# the rest of its group is prefilled a step before the others join, and every group after it
# is then prefilled in two passes, not one (on an H200, 64 streams through HTTP spent twice
# raw's time in prefill steps). With two, it is prefilled with its group like any prompt.
FEED_AT_LEAST: Final = 2


@dataclass(eq=False, slots=True)
class Slot:
    spec: Spec
    fed: list[int]  # prompt, recorded tokens, then each generated token
    cached: int
    done: int
    processors: list[Any]  # built once: a grammar's state must survive a move into the batch


@dataclass(eq=False, slots=True)
class Solo:
    """The one job decoded alone: mlx-lm's generate_step over a plain KV cache."""

    slot: Slot
    cache: list[Any]
    steps: Generator[tuple[Any, Any], None, None]


@dataclass(eq=False, slots=True)
class Start:
    """A job taken off the queue: its slot, the KV cache of what it has fed so far and the
    tokens still to feed."""

    slot: Slot
    cache: list[Any]
    rest: list[int]
    told: bool = False  # whether the server has heard it started (a long prompt: at once)

    @property
    def id(self) -> int:
        return self.slot.spec.id


class BatchScheduler:
    """Owns a BatchGenerator; `run` serves one connection until Close or until it closes."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        cache: PrefixCache,
        max_batch: int,
        gather_s: float = EngineSettings.gather_s,
        observer: Observer = QUIET,
        prefill_group: int = PREFILL_GROUP,
        prefill_chunk: int = PREFILL_CHUNK,
        draft: Any = None,
        num_draft: int = 2,
    ):
        """`draft`: a draft model: every job is then decoded alone, speculatively."""
        if prefill_group < 1:  # BatchGenerator would never start a prompt: jobs hang
            raise ValueError(f"a prefill group holds at least one prompt, not {prefill_group}")
        if prefill_chunk < 1:
            raise ValueError(f"a prefill chunk holds at least one token, not {prefill_chunk}")
        self.model = model
        self.draft, self.num_draft = draft, num_draft
        self.tokenizer = tokenizer
        self._constraints: Any = None  # grammars (omni.tools.grammar), built on first use
        self.cache = cache
        self.scorer = Scorer(tokenizer)
        eos = sorted(tokenizer.eos_token_ids)
        self.batch = BatchGenerator(
            model,
            stop_tokens=[[t] for t in eos],
            completion_batch_size=max_batch,
            prefill_batch_size=min(prefill_group, max_batch),
            # What it is given is a chunk at most (longer prompts are fed apart, see
            # _take_long): a step of it, next_generated, feeds at most one chunk a prompt.
            prefill_step_size=prefill_chunk,
        )
        self.chunk = prefill_chunk
        self.max_batch = max_batch
        self.gather_s = gather_s
        self._oldest_wait = 0.0  # when the oldest waiting job arrived
        self._behind = 0  # what the last job to arrive said of the requests behind it
        self._checked = 0.0  # when the scheduler last decided whether to gather
        self.observer = observer  # told of each step (benchmarks: omni.runtime.observe)
        self.slots: dict[int, Slot] = {}  # by BatchGenerator uid
        self.waiting: deque[Spec] = deque()
        self.prefills: deque[Start] = deque()  # long prompts, fed a chunk a step, in turn
        self.ready: deque[Start] = deque()  # taken off the queue, to start as short prompts
        self.group: list[Start] = []  # short prompts to feed together in this step
        # Whether a group's first tokens come from its prefill pass (omni.runtime.first_tokens);
        # else BatchGenerator feeds new prompts itself.
        self.first_from_prefill = first_tokens.joins(self.batch)
        self.solo: Solo | None = None
        self.eos = set(eos)
        self.stopping: set[int] = set()  # job ids asked to stop
        self.out: list[Output] = []
        self._conn: Connection | None = None
        self._closing = False  # Close arrived in the middle of a long prefill
        self._samplers: dict[tuple[float, float, float, int], Any] = {}
        self._arrivals = 0  # jobs received since the last step
        self._usual_s = 0.0  # a step's usual length (a moving average), for the slow-step log
        self._chunked: tuple[int, int, int, int] | None = None  # the step's chunk: id, n, fed, of
        self._step_began: float | None = None  # when the step in progress began (the watchdog)
        self._feeding = 0  # prompts of the group being fed now (the watchdog)

    @property
    def busy(self) -> bool:
        return bool(
            self.slots or self.waiting or self.solo or self.prefills or self.ready or self.group
        )

    def run(self, conn: Connection) -> None:
        # MLX lets go of the interpreter while it computes: a thread sees a step in progress.
        stop = threading.Event()
        watchdog = threading.Thread(target=self._watchdog, args=(stop,), daemon=True)
        watchdog.start()
        try:
            with self.observer.serving(self.batch):
                self._run(conn)
        finally:
            stop.set()

    def _run(self, conn: Connection) -> None:
        observe, clock = self.observer, time.perf_counter
        mark = clock()
        self._conn = conn
        while not self._closing and self._receive(conn, self._wait_s()):
            arrived, self._arrivals = self._arrivals, 0
            now = clock()
            observe.on_wake(now - mark, arrived)
            mark = now
            if arrived or self.waiting or self.ready or self.stopping:
                grouped = self._schedule(now, arrived)
            else:  # nothing to take in or stop: a decode step's worth of Python saved
                grouped, self._checked = False, now
            now = clock()
            observe.on_admit(now - mark, grouped)
            mark = now
            self._chunked, self._step_began = None, now
            if self.prefills:
                self._prefill_chunk()
                # A prompt just fed takes its first token in this step, beside the batch's.
                if not self.first_from_prefill:
                    while self.ready and self.solo is None and 0 < len(self.slots) < self.max_batch:
                        self._begin(self._lead, self.ready.popleft())
                elif self.solo is None and self.slots:  # (the others: the next step's group)
                    self._take_group(waiting=False)
            if (solo := self.solo) is not None:
                try:
                    self._solo_step(solo)
                except Exception:  # errors travel as values (their text: the log)
                    log.exception("generation step failed")
                    self.solo = None
                    self.out.append(Failed(solo.slot.spec.id, GENERATION_FAILED))
            elif self.slots:
                try:
                    self._step()
                except Exception:  # errors travel as values; the batch starts over
                    log.exception("generation step failed")
                    self._fail_all(GENERATION_FAILED)
            # After the batch's decode step, as BatchGenerator prefills a group after its own:
            # the running streams wait for one pass, however many groups come in a row.
            if self.group:
                self._feed_group()
            now = clock()
            self._step_began = None
            self._watch(now - mark)
            running = len(self.slots) + (self.solo is not None)
            observe.on_step(now, now - mark, arrived, len(self.waiting), running)
            mark = now
            sent = len(self.out)
            if self.out:
                conn.send(self.out)  # one message per step, whatever the batch size
                self.out = []
            now = clock()
            observe.on_sent(sent, now - mark)
            mark = now

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
            if self.ready and _solo_ok(self.ready[0].slot.spec):
                self._begin(self._start_solo, self.ready.popleft())
            elif self.waiting and _solo_ok(self.waiting[0]):
                self._begin_spec(self._start_solo, self.waiting.popleft())
        grouped = bool(
            (self.ready or self.waiting)
            and not hold
            and len(self.slots) + len(self.group) < self.max_batch
            and self._groups_align()
        )
        if grouped:
            if self.first_from_prefill:
                self._take_group()
            else:
                while self.ready and len(self.slots) < self.max_batch:
                    self._begin(self._lead, self.ready.popleft())
                while self.waiting and len(self.slots) + len(self.prefills) < self.max_batch:
                    self._begin_spec(self._admit, self.waiting.popleft())
        self._cancel_stopped()
        return grouped

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
            log.exception("could not start a generation")
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
        except Exception:  # one bad request must not stop the engine
            log.exception("could not start a generation")
            self.out.append(Failed(spec.id, GENERATION_FAILED))
            return None

    def _long(self, tokens: int) -> bool:
        """Whether a prompt of `tokens` to feed is long: a prefill group of such prompts
        would be more than a chunk of work (BatchGenerator pads a group out to its longest),
        so it is fed here, alone, a chunk a step."""
        return tokens * self.batch.prefill_batch_size > self.chunk and tokens > FEED_AT_LEAST

    def _take_long(self) -> None:
        """Long queued jobs leave the queue for the prefill, where none waits for a group and
        a chunk a step is fed (one whose prefix is cached may turn out short: it starts apart
        all the same). A running job counts against the batch size."""
        if not self.waiting or not any(self._long(_fed(w)) for w in self.waiting):
            return
        kept: deque[Spec] = deque()
        for spec in self.waiting:
            running = len(self.slots) + (self.solo is not None) + len(self.prefills)
            running += len(self.group)
            if not self._long(_fed(spec)) or running + len(self.ready) >= self.max_batch:
                kept.append(spec)
                continue
            if (start := self._taken(spec)) is None:
                continue
            self._started(start)
            (self.prefills if self._long(len(start.rest)) else self.ready).append(start)
        self.waiting = kept

    def _prefill_chunk(self) -> None:
        """Feed a long prompt one chunk, leaving its last tokens to feed as it starts. The
        prompts take turns, a chunk each: a short one behind a long one waits a chunk, not the
        whole of it."""
        start = self.prefills[0]
        n = min(self.chunk, len(start.rest) - FEED_AT_LEAST)
        clock = time.perf_counter
        began = clock()
        try:
            with mx.stream(self.batch.stream):
                self.model(mx.array(start.rest[:n])[None], cache=start.cache)
                mx.eval([c.state for c in start.cache])
            mx.clear_cache()  # as BatchGenerator does after each chunk: memory stays flat
        except Exception:  # errors travel as values (their text: the log)
            log.exception("prefill step failed")
            self.prefills.popleft()
            self.out.append(Failed(start.id, GENERATION_FAILED))
            return
        self.observer.on_prefill(clock() - began, n, chunk=True)
        fed = len(start.slot.fed) - len(start.rest)
        self._chunked = (start.id, n, fed, len(start.slot.fed))
        start.rest = start.rest[n:]
        if len(start.rest) <= FEED_AT_LEAST:
            self.ready.append(self.prefills.popleft())
        else:
            self.prefills.rotate(-1)

    def _feed_group(self) -> None:
        """Feed this step's group in one pass that gives each its first token, then let the
        group join the batch's decoding (its next token is computed while the step's outputs
        go to the server)."""
        group, self.group = self.group, []
        rows = [
            first_tokens.Row(
                s.rest,
                s.cache,
                list(s.slot.fed),
                self._sampler(s.slot.spec.sampling),
                s.slot.processors,
            )
            for s in group
        ]
        began = time.perf_counter()
        self._feeding = len(rows)
        try:
            with mx.stream(self.batch.stream):
                fed = first_tokens.feed(self.model, rows)
        except Exception:  # errors travel as values (their text: the log)
            log.exception("prefill step failed")
            self.out.extend(Failed(s.id, GENERATION_FAILED) for s in group)
            return
        finally:
            self._feeding = 0
        self.observer.on_prefill(time.perf_counter() - began, sum(len(r.rest) for r in rows), False)
        ended: set[int] = set()
        try:
            keep = [i for i, start in enumerate(group) if self._first(start, fed, i, ended)]
        except Exception:  # errors travel as values (their text: the log)
            log.exception("generation step failed")
            self.out.extend(Failed(s.id, GENERATION_FAILED) for s in group if s.id not in ended)
            return
        if not keep:
            return
        left = [group[i].slot for i in keep]
        try:
            with mx.stream(self.batch.stream):
                uids = first_tokens.join(
                    self.batch,
                    self.model,
                    fed,
                    rows,
                    keep,
                    [slot.spec.sampling.max_tokens - slot.done for slot in left],
                )
        except Exception:  # errors travel as values (their text: the log)
            log.exception("generation step failed")
            self.out.extend(Failed(slot.spec.id, GENERATION_FAILED) for slot in left)
            return
        self.slots.update(zip(uids, left, strict=True))

    def _first(self, start: Start, fed: first_tokens.Fed, i: int, ended: set[int]) -> bool:
        """Hand out row `i`'s first token; whether the job goes on (else it ended there, an
        end token or its last, and its cache is kept for reuse; its id is added to `ended`)."""
        slot, token = start.slot, fed.tokens[i]
        spec = slot.spec
        held = list(slot.fed)  # what the pass fed: the first token is not in the cache
        self._started(start)
        if (reason := self._emit(slot, token, fed.logprobs[i])) is None:
            return True
        # Named by what it holds (a cache with no offset, a recurrent state, is taken at its word).
        self.cache.insert(spec.cache_namespace, held, [c.extract(i) for c in fed.cache])
        self.out.append(Finished(spec.id, reason, len(spec.prompt), slot.done, slot.cached))
        ended.add(spec.id)
        return False

    def _watch(self, seconds: float) -> None:
        """Log a step far longer than usual, with what it did."""
        usual = self._usual_s
        if usual and seconds > max(SLOW_STEP_S, SLOW_STEP_FACTOR * usual):
            log.warning(
                "an engine step took %.1f s (usually %.3f s): %s", seconds, usual, self._did()
            )
        self._usual_s = seconds if not usual else 0.9 * usual + 0.1 * seconds

    def _watchdog(self, stop: threading.Event) -> None:
        """Log a step still running far longer than usual, once, with what it is doing: a
        stall shows in the log while it lasts."""
        warned = None
        while not stop.wait(WATCH_EVERY_S):
            began, usual = self._step_began, self._usual_s
            if began is None or not usual or began == warned:
                continue
            lasted = time.perf_counter() - began
            if lasted > max(SLOW_STEP_S, SLOW_STEP_FACTOR * usual):
                warned = began
                log.warning(
                    "an engine step has run for %.1f s (usually %.3f s): %s",
                    *(lasted, usual, self._doing()),
                )

    def _doing(self) -> str:
        """What the step in progress is doing, in words (read from the watchdog's thread: a
        snapshot, for the log)."""
        parts = []
        if feeding := self._feeding:
            parts.append(f"feeding a group of {feeding} prompts")
        if prefills := list(self.prefills):
            p = prefills[0]
            fed, total = len(p.slot.fed) - len(p.rest), len(p.slot.fed)
            parts.append(f"feeding job {p.id}'s prompt ({fed} of {total} tokens fed)")
        if (solo := self.solo) is not None:
            parts.append(f"decoding job {solo.slot.spec.id} alone")
        elif slots := len(self.slots):
            n = len(getattr(self.batch, "_currently_processing", None) or ())
            parts.append(f"decoding {slots} jobs in the batch ({n} prompts prefilling)")
        return "; ".join(parts) or "nothing"

    def _did(self) -> str:
        """What the step just ended did, in words."""
        parts = []
        if self._chunked is not None:
            job, n, fed, total = self._chunked
            parts.append(f"a chunk of {n} tokens of job {job}'s prompt ({fed} of {total} fed)")
        if self.solo is not None:
            parts.append(f"decoding job {self.solo.slot.spec.id} alone")
        elif self.slots:
            n = len(getattr(self.batch, "_currently_processing", None) or ())
            parts.append(f"decoding {len(self.slots)} jobs in the batch ({n} prompts prefilling)")
        return "; ".join(parts) or "nothing"

    def _receive(self, conn: Connection, wait_s: float | None) -> bool:
        """Take in what the server sent, waiting up to `wait_s` for the first message (None:
        for as long as it takes); False once it asks to close (or is gone)."""
        while conn.poll(wait_s):
            wait_s = 0
            match conn.recv():
                case Spec() as spec:
                    if not self.waiting:
                        self._oldest_wait = time.perf_counter()
                    self.waiting.append(spec)
                    self._behind = spec.behind
                    self._arrivals += 1
                case Cancel(job_id):
                    self.stopping.add(job_id)
                case MaxBatch(size):
                    self.max_batch = size
                case Close():
                    return False
        return True

    def _wait_s(self) -> float | None:
        """How long the next look at the pipe may wait: for ever when there is nothing to do,
        not at all when there is, and what is left of the gathering window while an idle
        engine expects more jobs (_expecting)."""
        if not self.busy:
            return None
        now = time.perf_counter()
        return max(0.0, self._oldest_wait + self.gather_s - now) if self._expecting(now) else 0

    def _expecting(self, now: float) -> bool:
        """Whether an idle engine waits for jobs the server said are on their way. Requests
        sent at once cross the server one after another (HTTP, the template, the records:
        ~1 ms each), so their jobs come here a little apart: started as they came, the first
        would run alone while the rest arrive, then move into the batch beside them, and
        they would wait for that. Held until the server has taken in the last of them (its
        job says nobody is behind it), a prefill group's worth is here, or `gather_s` has
        passed since the first, they are prefilled together, as if they had come at once.
        A job that comes alone says nobody is behind it and starts at once."""
        return (
            self._behind > 0
            and not (
                self.slots or self.solo is not None or self.prefills or self.ready or self.group
            )
            and 0 < len(self.waiting) < self.batch.prefill_batch_size
            and now - self._oldest_wait < self.gather_s
        )

    def _gathering(self, now: float, arrived: int) -> bool:
        """Jobs still arriving while others decode wait a little to be prefilled together:
        one forward pass for a group, as when they come at once, not one pass (and one new
        batch shape) for each job of a trickle. They wait while others keep coming, until a
        prefill group's worth are there, and only if one more step keeps the oldest within
        `gather_s` (so where a step takes longer than that, as on a CPU, nobody waits), and
        only jobs of which a group's worth is a chunk of work at most: a longer prompt gains
        nothing from company (a group is padded out to its longest).
        `arrived`: jobs received since the last step."""
        step, self._checked = now - self._checked, now
        running = len(self.slots) + (self.solo is not None) + len(self.group)
        group = self.batch.prefill_batch_size
        return (
            arrived > 0
            and running > 0
            and len(self.waiting) < group
            and running + len(self.waiting) < self.max_batch
            and now - self._oldest_wait + step < self.gather_s
            and not any(self._long(_fed(w)) for w in self.waiting)
        )

    def _groups_align(self) -> bool:
        """Whether jobs handed to BatchGenerator now are prefilled in full groups. It fills a
        prefill group up to its size G counting the prompts it has just prefilled, which move
        to decoding in the same step: more jobs than the room those k leave start a group of
        G - k, and every group after alternates k, G - k (twice the passes). So such jobs wait
        the one step those k take to move on; jobs that fit in the room go at once (so with
        max_batch <= G nobody ever waits here). A long prompt still being prefilled in chunks
        holds nobody up: new jobs join its passes."""
        # mlx-lm's private list (test_gather fails if it goes: groups split again, no error).
        processing = getattr(self.batch, "_currently_processing", None) or ()
        # mlx-lm's own test for a prompt done but for its last token (mlx_lm.generate, _next).
        finishing = sum(len(s[0]) == 1 and len(s[0][0]) == 1 for s in processing)
        if not finishing:
            return True
        handed = min(len(self.waiting), self.max_batch - len(self.slots))
        return handed <= self.batch.prefill_batch_size - len(processing)

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
        if self.draft is not None:  # the two models' caches, fresh (the prefix cache: neither)
            cache, rest = make_prompt_cache(self.model) + make_prompt_cache(self.draft), fed
        else:
            cache, rest = self.cache.nearest(spec.cache_namespace, fed, FEED_AT_LEAST)
        cached, done = len(fed) - len(rest), len(spec.resume_tokens)
        return Start(Slot(spec, fed, cached, done, self._processors(spec)), cache, rest)

    def _admit(self, start: Start) -> None:
        self._insert(start.slot, start.cache, start.rest)
        self._started(start)

    def _lead(self, start: Start) -> None:
        """A job fed apart (a long prompt) joins the batch after its first token, which it
        takes alone from its own cache (a step of the solo path): not after a prefill pass in
        BatchGenerator and the two steps it takes to move a prompt to decoding. A seeded job
        joins as it is (its random stream must not depend on how it started)."""
        if not _solo_ok(start.slot.spec) or self.solo is not None:
            self._admit(start)
            return
        self._start_solo(start)
        try:
            self._solo_step(self.solo)  # type: ignore[arg-type]
            if self.solo is not None:
                self._end_solo()  # on into the batch, from its cache
        finally:
            self.solo = None

    def _started(self, start: Start) -> None:
        """Tell the server a job has started (a long prompt did when its prefill began)."""
        if not start.told:
            start.told = True
            self.out.append(Started(start.id, True))

    def _insert(self, slot: Slot, cache: list[Any], rest: list[int]) -> None:
        s = slot.spec.sampling
        (uid,) = self.batch.insert(
            [rest],
            max_tokens=[s.max_tokens - slot.done],
            caches=[cache],
            # What the cache already holds: penalties must see the same history either way.
            all_tokens=[slot.fed[: len(slot.fed) - len(rest)]],
            samplers=[self._sampler(s)],
            logits_processors=[slot.processors],
        )
        self.slots[uid] = slot

    def _start_solo(self, start: Start) -> None:
        slot, cache, rest, spec = start.slot, start.cache, start.rest, start.slot.spec
        s = spec.sampling
        held = mx.array(slot.fed[: len(slot.fed) - len(rest)])  # all the cache holds
        if self.draft is not None:
            self.solo = Solo(slot, cache, self._speculative(slot, cache, rest, held))
            self._started(start)
            return
        steps = generate_step(
            mx.array(rest),
            self.model,
            max_tokens=s.max_tokens - slot.done,
            sampler=self._sampler(s),
            # generate_step shows processors only the tokens it was given: add what the cache holds.
            logits_processors=[_with_history(p, held) for p in slot.processors],
            prompt_cache=cache,
            # Never more than a chunk (a longer prompt was fed before); a cancel is heard.
            prefill_step_size=self.chunk,
            prompt_progress_callback=lambda done, total: self._heard_stop(spec.id),
        )
        self.solo = Solo(slot, cache, steps)
        self._started(start)

    def _speculative(
        self, slot: Slot, cache: list[Any], rest: list[int], held: mx.array
    ) -> Generator[tuple[Any, Any], None, None]:
        s = slot.spec.sampling
        steps = speculative_generate_step(
            mx.array(rest),
            self.model,
            self.draft,
            num_draft_tokens=self.num_draft,
            max_tokens=s.max_tokens - slot.done,
            sampler=self._sampler(s),
            logits_processors=[_with_history(p, held) for p in slot.processors],
            prompt_cache=cache,
            prefill_step_size=self.chunk,
        )
        try:
            for token, logprobs, _drafted in steps:
                yield token, logprobs
        finally:
            steps.close()

    def _solo_step(self, solo: Solo) -> None:
        slot = solo.slot
        try:
            y, logprobs = next(solo.steps)
        except StopIteration:  # max_tokens reached
            self._end_solo("length")
            return
        except _Stopped:  # cancelled (or closing) during the prompt
            self._end_solo()
            return
        token = int(y.item() if hasattr(y, "item") else y)
        if (reason := self._emit(slot, token, logprobs)) is not None:
            self._end_solo(reason, token if reason == "stop" else None)

    def _emit(self, slot: Slot, token: int, logprobs: Any) -> FinishReason | None:
        """Hand out a job's new token (an end-of-sequence token is not output); why the job
        ends with it, if it does."""
        if token in self.eos:
            return "stop"
        slot.fed.append(token)
        slot.done += 1
        k = slot.spec.sampling.logprobs
        scored = None if k is None else self.scorer(token, logprobs, k)
        self.out.append(Token(slot.spec.id, token, scored))
        return "length" if slot.done >= slot.spec.sampling.max_tokens else None

    def _heard_stop(self, job_id: int) -> None:
        """Between prompt chunks: take in what the server sent; stop if this job is cancelled."""
        if self._conn is not None and not self._receive(self._conn, 0):
            self._closing = True
        if self._closing or job_id in self.stopping:
            raise _Stopped

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
            spec = slot.spec
            ended = reason or "cancelled"
            self.out.append(Finished(spec.id, ended, len(spec.prompt), slot.done, slot.cached))
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

    def _processors(self, spec: Spec) -> list[Any]:
        processors = logits_processors(spec.sampling)
        budget = spec.sampling.thinking_budget
        start: tuple[int, ...] = self.tokenizer.think_start_tokens or ()
        end: tuple[int, ...] = self.tokenizer.think_end_tokens or ()
        if budget is not None and len(start) == 1 and len(end) == 1:
            processors.append(ThinkBudget(start[0], end[0], budget))
        if spec.constraint is not None:
            if self._constraints is None:
                from omni.runtime.constraints import Constraints

                self._constraints = Constraints(self.tokenizer)
            processors.append(self._constraints.processor(spec.constraint, spec.resume_tokens))
        return processors

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
        out = self.out
        if self.observer.times_prefill:
            with self.batch.stats() as step:
                generated = self.batch.next_generated()
            self.observer.on_prefill(step.prompt_time, step.prompt_tokens, chunk=False)
        else:
            generated = self.batch.next_generated()
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
        caches = self.batch.remove(stopped, return_prompt_caches=True)
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
        spec = slot.spec
        self.out.append(Finished(spec.id, reason, len(spec.prompt), slot.done, slot.cached))

    def _keep(self, slot: Slot, cache: list[Any], eos: int | None) -> None:
        """Keep an ended job's cache for prefix reuse. It holds every token fed, and `eos`, the
        end token the job stopped on, if any: the model saw it before it was read."""
        held = slot.fed if eos is None else [*slot.fed, eos]
        self.cache.insert(slot.spec.cache_namespace, held, cache)

    def _fail_all(self, message: str) -> None:
        for uid, slot in list(self.slots.items()):
            self.batch.remove([uid])
            self.slots.pop(uid)
            self.out.append(Failed(slot.spec.id, message))


class _Stopped(Exception):
    """A solo job's prompt was cancelled between two chunks."""


def _fed(spec: Spec) -> int:
    """The tokens a job feeds the model before its first new one, at most (none cached)."""
    return len(spec.prompt) + len(spec.resume_tokens)


def _solo_ok(spec: Spec) -> bool:
    """A seeded job always runs in the batch: its random stream must not depend on whether it
    started alone (generate_step samples one token ahead, which a move would throw away)."""
    s = spec.sampling
    return s.seed is None or s.temperature == 0


def _with_history(processor: Any, held: mx.array) -> Any:
    if held.size == 0:
        return processor

    def process(tokens: mx.array, logits: mx.array) -> mx.array:
        out: mx.array = processor(mx.concatenate([held, tokens]), logits)
        return out

    return process


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
