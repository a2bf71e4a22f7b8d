"""Continuous batching in the engine process with mlx-lm's BatchGenerator.

New jobs join at the next step, finished ones leave; each keeps its own sampler, logits
processors, length limit and stop tokens. A job that arrives while nothing else runs is decoded
alone (omni.runtime.chat.solo) and moves into the batch when another arrives. A long prompt is
fed a chunk a step between the running streams' decode steps (omni.runtime.chat.prefill). The
outputs of one step leave in one message to the server process (omni.runtime.chat.engine),
which detokenizes them: this process does nothing but decode, so the server's Python work never
holds up a step.

The scheduler's parts, each a module, build on one another: its state, the pipe, the batch's
decoding, the prefill, the solo path, gathering and admission; this loop drives them a step at
a time.
"""

from __future__ import annotations

import threading
from multiprocessing.connection import Connection

from omni.runtime.chat.admission import Admission
from omni.runtime.chat.state import GENERATION_FAILED, Solo
from omni.runtime.chat.watchdog import Watchdog
from omni.runtime.chat.wire import Failed


class BatchScheduler(Admission):
    """Owns a BatchGenerator; `run` serves one connection until Close or until it closes."""

    watchdog: Watchdog

    def run(self, conn: Connection) -> None:
        # MLX lets go of the interpreter while it computes: a thread sees a step in progress.
        stop = threading.Event()
        self.watchdog = Watchdog(self)
        watchdog = threading.Thread(target=self.watchdog.run, args=(stop,), daemon=True)
        watchdog.start()
        try:
            with self.observer.serving(self.batch):
                self._run(conn)
        finally:
            stop.set()

    def _run(self, conn: Connection) -> None:
        observe, clock = self.observer, self.clock
        mark = clock()
        self._conn = conn
        while not self._closing and self._receive(conn, self._wait_s()):
            arrived, self._arrivals = self._arrivals, 0
            now = clock()
            observe.on_wake(now - mark, arrived)
            mark = now
            grouped = self._admit_jobs(now, arrived)
            now = clock()
            observe.on_admit(now - mark, grouped)
            mark = now
            self._chunked, self._step_began = None, now
            self._decode()
            now = clock()
            self._step_began = None
            self.watchdog.watch(now - mark)
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

    def _admit_jobs(self, now: float, arrived: int) -> bool:
        """Whether jobs were handed to the batch in this step."""
        if arrived or self.waiting or self.ready or self.stopping:
            return self._schedule(now, arrived)
        # Nothing to take in or stop: a decode step's worth of Python saved.
        self._checked = now
        return False

    def _decode(self) -> None:
        """A step's work: a long prompt's chunk, a decode step (alone or of the batch), then
        the group of short prompts taken in this step."""
        if self.prefills:
            self._prefill_chunk()
            self._start_fed()
        if (solo := self.solo) is not None:
            self._decode_solo(solo)
        elif self.slots:
            self._decode_batch()
        # After the batch's decode step, as BatchGenerator prefills a group after its own:
        # the running streams wait for one pass, however many groups come in a row.
        if self.group:
            self._feed_group()

    def _start_fed(self) -> None:
        """A prompt just fed takes its first token in this step, beside the batch's."""
        if not self.first_from_prefill:
            while self.ready and self.solo is None and 0 < len(self.slots) < self.max_batch:
                self._begin(self._lead, self.ready.popleft())
        elif self.solo is None and self.slots:  # (the others: the next step's group)
            self._take_group(waiting=False)

    def _decode_solo(self, solo: Solo) -> None:
        try:
            self._solo_step(solo)
        except Exception:  # errors travel as values (their text: the log)
            self._step_failed("generation step failed")
            self.solo = None
            self.out.append(Failed(solo.slot.spec.id, GENERATION_FAILED))

    def _decode_batch(self) -> None:
        try:
            self._step()
        except Exception:  # errors travel as values; the batch starts over
            self._step_failed("generation step failed")
            self._fail_all(GENERATION_FAILED)
