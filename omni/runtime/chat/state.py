"""What the scheduler's parts share: its jobs (each a Slot; a job taken off the queue, a Start;
the one decoded alone, a Solo), its queues, the BatchGenerator, and the few acts every part
does: tell the server a job started, hand out a token, keep an ended job's cache."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Final

from omni.ports.jobs import FinishReason
from omni.runtime.chat import batch_generator
from omni.runtime.chat.logprobs import Scorer
from omni.runtime.chat.observe import QUIET, Observer
from omni.runtime.chat.prefix_cache import PrefixCache
from omni.runtime.chat.sampling import Processors, Samplers
from omni.runtime.chat.wire import Finished, Output, Spec, Started, Token
from omni.settings import EngineSettings

log = logging.getLogger(__name__)

# A failed job's message, which clients read: the exception's text goes to the log only.
GENERATION_FAILED: Final = "generation failed: the engine had an error (see the server's log)"

PREFILL_GROUP: Final = 8  # prompts prefilled together by default (mlx-lm's prefill batch)
PREFILL_CHUNK: Final = 512  # prompt tokens a step feeds one prompt by default (worker: per device)
# Tokens a job hands BatchGenerator at least, even when its cache holds all but the last one.
# A job of one token goes to decoding at once, yet it has taken a place in a prefill group:
# the rest of its group is prefilled a step before the others join, and every group after it
# is then prefilled in two passes, not one (on an H200, 64 streams through HTTP spent twice
# raw's time in prefill steps). With two, it is prefilled with its group like any prompt.
FEED_AT_LEAST: Final = 2


class RanksOutOfStep(Exception):
    """A step failed on a sharded model's rank: the ranks end (omni.runtime.chat.worker)."""


@dataclass(eq=False, slots=True)
class Slot:
    spec: Spec
    fed: list[int]  # prompt, recorded tokens, then each generated token
    cached: int
    done: int
    processors: list[Any]  # built once: a grammar's state must survive a move into the batch
    from_disk: int = 0  # of the cached tokens, those the prefix cache's disk tier gave


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


class SchedulerState:
    """The scheduler's state, and what each of its parts does with it alike."""

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
        self.cache = cache
        self.scorer = Scorer(tokenizer)
        self.samplers = Samplers()
        self.processors = Processors(tokenizer)
        eos = sorted(tokenizer.eos_token_ids)
        self.batch = batch_generator.make(model, eos, max_batch, prefill_group, prefill_chunk)
        self.chunk = prefill_chunk
        self.max_batch = max_batch
        self.gather_s = gather_s
        self.clock: Callable[[], float] = time.perf_counter  # every part's (tests: a script's)
        self._oldest_wait = 0.0  # when the oldest waiting job arrived
        self._behind = 0  # what the last job to arrive said of the requests behind it
        self._checked = 0.0  # when the scheduler last decided whether to gather
        self.observer = observer  # told of each step (benchmarks: omni.runtime.chat.observe)
        self.slots: dict[int, Slot] = {}  # by BatchGenerator uid
        self.waiting: deque[Spec] = deque()
        self.prefills: deque[Start] = deque()  # long prompts, fed a chunk a step, in turn
        self.ready: deque[Start] = deque()  # taken off the queue, to start as short prompts
        self.group: list[Start] = []  # short prompts to feed together in this step
        # Whether a group's first tokens come from its prefill pass (chat.first_tokens);
        # else BatchGenerator feeds new prompts itself.
        self.first_from_prefill = batch_generator.joins(self.batch)
        self.solo: Solo | None = None
        self.eos = set(eos)
        self.stopping: set[int] = set()  # job ids asked to stop
        self.out: list[Output] = []
        self._conn: Connection | None = None
        self._closing = False  # Close arrived in the middle of a long prefill
        self._arrivals = 0  # jobs received since the last step
        self._usual_s = 0.0  # a step's usual length (a moving average), for the slow-step log
        self._chunked: tuple[int, int, int, int] | None = None  # the step's chunk: id, n, fed, of
        self._step_began: float | None = None  # when the step in progress began (the watchdog)
        self._feeding = 0  # prompts of the group being fed now (the watchdog)
        self.sharded = False  # the model is sharded over ranks (omni.runtime.chat.rank)

    def _step_failed(self, what: str) -> None:
        """In an `except` of a step that failed: its exception logged, with `what` failed.
        A local engine goes on (the job fails); a sharded model's cannot: the other ranks may
        not have failed with it (a lost link fails one rank's collective), and ranks out of
        step wait for each other for ever. RanksOutOfStep ends them all."""
        log.exception("%s", what)
        if self.sharded:
            raise RanksOutOfStep(what)

    @property
    def busy(self) -> bool:
        return bool(
            self.slots or self.waiting or self.solo or self.prefills or self.ready or self.group
        )

    def _long(self, tokens: int) -> bool:
        """Whether a prompt of `tokens` to feed is long: a prefill group of such prompts
        would be more than a chunk of work (BatchGenerator pads a group out to its longest),
        so it is fed here, alone, a chunk a step."""
        return tokens * self.batch.prefill_batch_size > self.chunk and tokens > FEED_AT_LEAST

    def _started(self, start: Start) -> None:
        """Tell the server a job has started (a long prompt did when its prefill began)."""
        if not start.told:
            start.told = True
            self.out.append(Started(start.id, True))

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

    def _finished(self, slot: Slot, reason: FinishReason) -> Finished:
        """A job's end: its figures, and the prefix cache's memory as it ends."""
        spec = slot.spec
        return Finished(
            spec.id,
            reason,
            len(spec.prompt),
            slot.done,
            slot.cached,
            slot.from_disk,
            self.cache.nbytes,
        )

    def _keep(self, slot: Slot, cache: list[Any], eos: int | None) -> None:
        """Keep an ended job's cache for prefix reuse. It holds every token fed, and `eos`, the
        end token the job stopped on, if any: the model saw it before it was read."""
        held = slot.fed if eos is None else [*slot.fed, eos]
        self.cache.insert(slot.spec.cache_namespace, held, cache, slot.spec.session)


def fed_at_most(spec: Spec) -> int:
    """The tokens a job feeds the model before its first new one, at most (none cached)."""
    return len(spec.prompt) + len(spec.resume_tokens)


def solo_ok(spec: Spec) -> bool:
    """A seeded job always runs in the batch: its random stream must not depend on whether it
    started alone (generate_step samples one token ahead, which a move would throw away)."""
    s = spec.sampling
    return s.seed is None or s.temperature == 0
