"""The MLX engine: the model lives in its own process; jobs go in as messages, and the
outputs of each decode step come back in one message, turned into text here and handed to the
event loop as values.

Why a process and not a thread: a decode step is mostly Python (building the graph) between
waits on the device, and the server's own Python work (HTTP, SQLite, JSON, SSE) would hold the
interpreter lock that step needs. Apart, the two run in parallel and the server costs the
model nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import pickle
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omni.errors import ModelLoadError
from omni.ports.chat import Capabilities, RecommendedSampling
from omni.ports.jobs import Failed, Finished, Job, Output, Prefilled, Started
from omni.runtime.chat import delivery, stall, tokenizer, wire, worker
from omni.runtime.chat.delivery import HOLD_MIN, HOLD_S, Pending
from omni.runtime.chat.generation_config import recommended_sampling
from omni.runtime.chat.model_text import ModelText
from omni.runtime.chat.ranks import Launched
from omni.runtime.chat.worker import config_context_length
from omni.runtime.loading.source import ModelSource
from omni.runtime.model_process import stop_process
from omni.settings import EngineSettings, engine_knobs

log = logging.getLogger(__name__)


class MLXEngine(ModelText):
    """Runs the model in an engine process (omni.runtime.chat.worker); jobs are decoded together
    by continuous batching (omni.runtime.chat.scheduler)."""

    # Told, from the reader thread, how many jobs got a token in each step (/metrics).
    on_step: Callable[[int], None] | None = None
    # Nothing on disk for the pool to measure: the engine reports its memory_bytes.
    path = ""
    # What the engine process runs (a vision model's runs its own: omni.runtime.vision.worker).
    worker_main: Callable[..., None] = staticmethod(worker.main)

    def __init__(
        self,
        source: ModelSource,
        settings: EngineSettings | None = None,
        **given: Any,
    ):
        """`settings`: what `omni serve` built; else EngineSettings' defaults, `given` (its
        fields by name) and what tests and benchmarks set in the environment (engine_knobs),
        read at start()."""
        self.source = source
        self._settings, self._given = settings, given
        self.runtime: wire.Runtime | None = None  # what the engine process runs with, once loaded
        chosen = settings or EngineSettings(**given)
        self.template_args = dict(chosen.template_args)  # for every chat-template render
        self._max_batch = chosen.max_batch
        self.model_id = source.model_id
        self.context_length = 0
        self.max_token_bytes = 1  # the most bytes one token stands for (set once loaded)
        self.sampling = RecommendedSampling()  # its generation_config.json's (set once loaded)
        self._tokenizer: Any = None
        self._capabilities: tuple[tuple[Any, ...], Capabilities] | None = None
        self._process: Any = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, Pending] = {}
        self._generations = 0
        self._gone: str | None = None  # why the engine process is no longer there (for jobs)
        self._load_error: str | None = None  # why its weights did not load (for the log)
        self._crashed = False  # its process (or a rank of it) died: the pool loads it again
        self._rank_timeout_s: float | None = None  # a sharded model's: Ranks.timeout_s
        self._reader = threading.Thread(target=self._read, name="omni-engine-reader", daemon=True)
        self._loading = threading.Thread()  # set by begin()
        self._loaded = threading.Event()  # the weights are loaded, or failed to
        self._early: list[wire.Request] = []  # sent before they were

    def start(self) -> None:
        """Start the engine process and load the model; raise ModelLoadError if it cannot."""
        self.begin()
        self.wait_loaded()

    def begin(self) -> None:
        """Start loading: the engine process loads the weights while this returns as soon as
        the tokenizer is loaded here (for a local folder: a repo id is loaded whole first).
        Prompts can be rendered from then on, and jobs submitted wait in the order they came
        for the weights; if those fail to load, each ends Failed with the reason."""
        settings = self._settings or self._from_environment()
        settings = dataclasses.replace(settings, max_batch=self._max_batch)
        self._process, conn, forwarder = worker.spawn(self.worker_main, self.source, settings)
        self._rank_timeout_s = settings.ranks.timeout_s if settings.ranks is not None else None
        self._loading = threading.Thread(
            target=self._await_weights, args=(conn, forwarder), name="omni-engine-load",
            daemon=True,
        )  # fmt: skip
        local = Path(self.source.path)
        if not (local / "config.json").is_file():  # a repo id: its files come with the load
            self._await_weights(conn, forwarder)
            if self._gone is not None:
                raise ModelLoadError(self._load_error or self._gone)
            return
        try:
            from mlx_lm.utils import load_config

            self._load_tokenizer(load_config(local).get("eos_token_id"))
            self.context_length = config_context_length(local)
            self.sampling = recommended_sampling(local)  # for requests taken in meanwhile
        except Exception as exc:
            self._process.terminate()
            conn.close()
            raise ModelLoadError(f"cannot load model {self.source.path}: {exc}") from exc
        self._loading.start()

    def wait_loaded(self) -> None:
        """Until the weights are loaded; ModelLoadError if they cannot be."""
        if self._loading.ident is not None:
            self._loading.join()
        if self._gone is not None:
            raise ModelLoadError(self._load_error or self._gone)

    @property
    def loading(self) -> bool:
        """The weights are still being loaded (jobs submitted wait for them)."""
        return not self._loaded.is_set()

    @property
    def memory_bytes(self) -> int | None:
        """What the weights take in memory as the engine runs them, once loaded."""
        return None if self.runtime is None else self.runtime.memory_bytes or None

    @property
    def load_error(self) -> str | None:
        """Why the weights could not be loaded, once that is known, or why its process (a
        rank of a sharded model's) died: the pool loads it again for the next request."""
        failed = self._loaded.is_set() and (self._conn is None or self._crashed)
        return (self._load_error or self._gone) if failed else None

    def _await_weights(self, conn: Connection, forwarder: Path | None) -> None:
        """The engine process's answer to its load: serve, or fail what waits."""
        process = self._process  # close() may let go of it meanwhile
        try:
            message = conn.recv()
        except (EOFError, OSError):
            process.join()
            why = process.why() if isinstance(process, Launched) else process.exitcode
            message = wire.LoadFailed(f"the engine process exited ({why})")
        finally:  # loaded (or gone) by now: its mapping outlives the file
            if forwarder is not None:
                shutil.rmtree(forwarder.parent, ignore_errors=True)
        if not isinstance(message, wire.Loaded):
            conn.close()
            if self._gone is None:  # else closed meanwhile: nobody waits to know why
                self._load_error = f"cannot load model {self.source.path}: {message.message}"
                log.error("%s", self._load_error)
                # What the requests waiting read: the model's id; why is the log's.
                self._gone = ModelLoadError.of(self.model_id).message
            with self._send_lock:
                self._early.clear()
                self._loaded.set()
            self._deliver([wire.Failed(job_id, str(self._gone)) for job_id in list(self._pending)])
            return
        if self.context_length and message.context_length != self.context_length:
            log.warning("%s: context %d in its config, %d loaded", self.model_id,
                        self.context_length, message.context_length)  # fmt: skip
        self.context_length, self.runtime = message.context_length, message.runtime
        self.sampling = message.sampling
        if self._tokenizer is None:
            self._load_tokenizer(message.eos)
        with self._send_lock:  # what was submitted meanwhile goes first, in order
            for early in self._early:
                conn.send(early)
            self._early.clear()
            self._conn = conn
            self._loaded.set()
        self._reader.start()

    def _load_tokenizer(self, eos: Any) -> None:
        self._tokenizer = tokenizer.load(self.source.path, eos)
        self.max_token_bytes = tokenizer.longest_token(self._tokenizer)

    def _from_environment(self) -> EngineSettings:
        try:
            return EngineSettings(**{**engine_knobs(), **self._given})
        except ValueError as exc:  # a knob set wrong: the engine cannot start
            raise ModelLoadError(f"cannot load model {self.source.path}: {exc}") from None

    @property
    def max_batch(self) -> int:
        """How many jobs are decoded together; more wait, queued."""
        return self._max_batch

    @max_batch.setter
    def max_batch(self, value: int) -> None:
        self._max_batch = value
        self._send(wire.MaxBatch(value))

    @property
    def queued(self) -> int:
        """Jobs submitted but not yet decoding."""
        pending = list(self._pending.values())
        return sum(not p.started and not p.job.stop.is_set() for p in pending)

    @property
    def running(self) -> int:
        """Jobs the engine has taken and not yet ended (prefilling or decoding)."""
        return sum(p.started for p in list(self._pending.values()))

    @property
    def generations(self) -> int:
        """Jobs that reached the model (tests check single flight with it)."""
        return self._generations

    def submit(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        if not job.claim():  # cancelled before it got here
            job.outputs.put_nowait(Finished("cancelled", len(job.prompt), len(job.resume_tokens)))
            return
        if self._gone is not None:
            job.outputs.put_nowait(Failed(self._gone, self._crashed))
            return
        job_id = next(self._ids)
        self._pending[job_id] = delivery.pending(job, loop, self._tokenizer)
        self._send(wire.Spec.of(job_id, job))
        # Sent after the job itself, so the engine always knows the id it is asked to stop;
        # not once its end has come back (a finished request's clean-up cancels it too).
        job.on_cancel = lambda: self._cancel(job_id)
        if job.stop.is_set():
            self._send(wire.Cancel(job_id))

    def _cancel(self, job_id: int) -> None:
        if job_id in self._pending:  # its end has not come back yet
            self._send(wire.Cancel(job_id))

    def close(self) -> None:
        """Stop the engine process (running jobs end where they are)."""
        if self._process is None:
            return
        self._gone = self._gone or "the server is shutting down"
        if not self._loaded.is_set():  # still loading the weights: nobody waits for them
            self._process.terminate()
        self._send(wire.Close())
        stop_process(self._process, self._reader, self._conn)
        self._process = None

    def _send(self, message: wire.Request) -> None:
        try:
            with self._send_lock:
                if self._conn is not None:
                    # Pickled plainly: Connection.send's ForkingPickler (for handles and
                    # sockets, which no message carries) made a job's send a third dearer.
                    self._conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
                elif not self._loaded.is_set():  # sent once the weights are loaded
                    self._early.append(message)
        except (OSError, ValueError):  # the engine process is gone; the reader reports it
            pass

    def _read(self) -> None:
        """The outputs of the engine's steps, turned into values for the event loop that asked
        (a big batch's tokens held back a little: HOLD_MIN)."""
        conn = self._conn
        assert conn is not None
        held: list[wire.Output] = []
        oldest = last = 0.0  # when the oldest held output came; when the last step's came
        while True:
            try:
                if held and not conn.poll(max(0.0, oldest + HOLD_S - time.perf_counter())):
                    self._deliver(held)
                    held = []
                    continue
                timeout_s = self._rank_timeout_s
                if not held and timeout_s and stall.stalled(conn, timeout_s, self._working):
                    self._crash(
                        f"the model's ranks stopped answering: no step ended in {timeout_s:g} "
                        "s while work ran (a rank or a link between them is down)"
                    )
                    self._process.kill()
                    break
                outputs = conn.recv()
            except (EOFError, OSError):
                break
            if (on_step := self.on_step) is not None:
                on_step(sum(isinstance(o, wire.Token) for o in outputs))
            now = time.perf_counter()
            gap, last = now - last, now
            if not held:
                oldest = now
            held += outputs
            # Hold on only if the next step can still come within HOLD_S of the oldest.
            if len(outputs) < HOLD_MIN or now - oldest + gap >= HOLD_S:
                self._deliver(held)
                held = []
            elif urgent := delivery.urgent(outputs, self._pending):
                self._deliver([o for o in held if o.id in urgent])
                held = [o for o in held if o.id not in urgent]
        self._deliver(held)
        exit_code = self._process.exitcode if self._process is not None else None
        self._crash(f"the engine process exited unexpectedly (exit code {exit_code})")
        self._deliver([wire.Failed(job_id, str(self._gone)) for job_id in list(self._pending)])

    def _crash(self, why: str) -> None:
        """The engine's process (or a rank of it) is gone, for `why`: jobs fail (crashed),
        and the pool loads the model again. Not after a close (nobody waits then)."""
        if self._gone is None:
            self._crashed = True  # first: a job submitted meanwhile reads both
            self._gone = why
            log.error("%s", why)

    def _working(self) -> bool:
        return bool(self._pending) and self._loaded.is_set()

    def _deliver(self, outputs: list[wire.Output]) -> None:
        """One hand-off per event loop for `outputs` (a step's, or several held steps'),
        whatever the batch size."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Job, Output]]] = defaultdict(list)
        for output in outputs:
            pending = self._pending.get(output.id)
            if pending is None:
                continue
            items = by_loop[pending.loop]
            if isinstance(output, wire.Token):
                items.append((pending.job, delivery.delta(pending, output)))
            else:
                items.extend((pending.job, out) for out in self._settle(pending, output))
        delivery.hand_off(by_loop)

    def _settle(self, pending: Pending, output: wire.Output) -> list[Output]:
        """A job's start or end, as its own outputs (an ended job is no longer pending)."""
        match output:
            case wire.Started(_, reached):
                pending.started = True
                self._generations += reached
                return [Started()]
            case wire.Prefilled(_, fed, total):
                return [Prefilled(fed, total)]
            case wire.Finished(job_id):
                del self._pending[job_id]
                return delivery.finished(pending, output)
            case wire.Failed(job_id, message):
                del self._pending[job_id]
                return [Failed(message, self._crashed)]
        return []
