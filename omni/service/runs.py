"""Running generations: the recorder loop that turns engine outputs into appended events.

The generator itself writes the log (not the HTTP reader), so a response goes on, and is
recorded, whoever is or is not listening.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from omni.errors import Overloaded, ShuttingDown, StoreError
from omni.events import Append, Appender, EventLog, NewEvent, Notifier, StoredEvent
from omni.events.maintenance import streams_of
from omni.metrics import UNREAD, Metrics
from omni.ports.chat import Engine
from omni.ports.jobs import Delta, Failed, Finished, Output, Prefilled
from omni.protocol.recorder import ResponseRecorder
from omni.service.intake import Intake
from omni.service.leasing import Leasing
from omni.service.run import Run
from omni.service.run_metrics import observe
from omni.service.streams import dumps, progress_stream, request_stream, tokens_stream
from omni.service.unwritten import end_unwritten
from omni.settings import ServerSettings
from omni.vocabulary import CANCEL_REQUESTED, DELETED, PREFILL_PROGRESS, TOKENS

log = logging.getLogger(__name__)

SHUT_DOWN = "The server shut down before this {} finished."
# How many times one background run goes on after its engine died under it: a run that kills
# its engine each time (memory, say) ends failed, not in a loop of reloads.
CRASHES_SURVIVED = 2


class Runs:
    """The generations in flight in this process, by response id."""

    def __init__(
        self,
        store: EventLog,
        appender: Appender,
        notifier: Notifier,
        max_queued: int = ServerSettings.max_queued,
        *,
        leasing: Leasing | None = None,
        metrics: Metrics = UNREAD,
    ):
        self.max_queued = max_queued
        self.store = store
        self.appender = appender
        self.notifier = notifier
        self._runs: dict[str, Run] = {}
        self._early: dict[str, int] = {}  # mirrors of runs not listed yet (still opening)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()  # set by close(): endings stop waiting for the disk
        self.metrics = metrics  # the server's (UNREAD: nobody reads them)
        self.closing = False  # the server is stopping: no new work
        self._interrupted = False  # ... and what runs now is ended or left at once
        self.intake = Intake()  # requests on their way to open a run
        self.leasing = leasing or Leasing()  # the server's, where servers share the log
        # Continues a background run whose engine died, as a restart would (the Responses
        # service's recovery); None: such a run ends failed.
        self.on_crash: Callable[[str], Awaitable[Any]] | None = None
        self._crashes: dict[str, int] = {}  # background runs continued after a crash

    def check_capacity(self, engine: Engine | None = None) -> None:
        """Refuse new work: all of it (503) once the server is stopping, else (429) while too
        many jobs already wait for `engine`'s model."""
        if self.closing:
            raise ShuttingDown("The server is shutting down; retry shortly.")
        waiting = 0 if engine is None else engine.queued
        if waiting >= self.max_queued:
            raise Overloaded(
                f"{waiting} requests are waiting for the model (limit {self.max_queued}); "
                "retry shortly."
            )

    async def open(self, run: Run, *opening: Append) -> None:
        """Commit the run's opening events and start it. The engine starts on the job while
        they commit (its outputs wait in the job's queue, recorded once the opening is in the
        log): the first token is not held up by the first commit. If the commit fails, the
        job is cancelled and the error raised."""
        await self.leasing.claim(run.stream_id)  # before anything of it is in the log
        run.job.behind = self.intake.handed()
        if not run.settled:
            run.engine.submit(run.job)
        try:
            if run.settled and run.ending is not None:
                await run.ending(list(opening))
            else:
                await self.appender.append(*opening)
        except BaseException:
            run.job.cancel()
            await self.leasing.release([run.stream_id, *run.leased])
            raise
        self._track(run)

    def start(self, run: Run) -> None:
        """Start a run whose opening is already in the log (a restart's)."""
        self._track(run)
        run.engine.submit(run.job)

    def _track(self, run: Run) -> None:
        """List the run and record what its job sends, in a task of its own."""
        self._runs[run.stream_id] = run
        run.mirrors += self._early.pop(run.stream_id, 0)
        self._spawn(self._record(run), f"record-{run.response_id}")
        if self._interrupted:  # opened while the server stopped
            self._interrupt(run)
        if self.leasing.shared and run.is_response:
            self._spawn(self._watch_facts(run), f"facts-{run.response_id}")

    def _spawn(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch_facts(self, run: Run) -> None:
        """A cancel or a delete sent to another server reaches this one, which runs the
        response, through the log: the fact appended there, its wake-up here."""
        stream = request_stream(run.stream_id)
        after = 0  # the accepted request; a fact may come before this starts watching
        ended = asyncio.ensure_future(run.recorded.wait())
        try:
            with self.notifier.subscribe(stream) as wake:
                while not run.recorded.is_set():
                    wake.clear()
                    for fact in await self.store.read(stream, after):
                        after = fact.seq
                        if fact.type in (CANCEL_REQUESTED, DELETED):
                            self.cancel(run.stream_id)
                    woken = asyncio.ensure_future(wake.wait())
                    await asyncio.wait([woken, ended], return_when=asyncio.FIRST_COMPLETED)
                    woken.cancel()
        except StoreError as exc:
            log.warning("watching %s for a cancel failed: %s", stream, exc)
        finally:
            ended.cancel()

    def get(self, response_id: str) -> Run | None:
        return self._runs.get(response_id)

    def live(self) -> list[Run]:
        """The runs being recorded, or whose unstored rows still wait for their readers."""
        return list(self._runs.values())

    def cancel(self, response_id: str, unless_mirrored: bool = False) -> None:
        """Stop at the next token; a run the engine has not taken yet ends at once.
        `unless_mirrored`: a client went away, but others follow this generation."""
        run = self._runs.get(response_id)
        if run is None or (unless_mirrored and run.mirrors > 0):
            return
        if run.job.cancel():  # the engine never took it: end it here, at once
            done = len(run.job.resume_tokens)
            run.job.outputs.put_nowait(Finished("cancelled", len(run.job.prompt), done))

    def release(self, response_id: str) -> None:
        """The creating client is done with the stream (read to the end, or gone)."""
        run = self._runs.get(response_id)
        if run is not None:
            run.read = True
            run.settle()

    def hold(self, stream_id: str) -> None:
        """A mirror starts copying `stream_id` (listed yet or still opening)."""
        run = self._runs.get(stream_id)
        if run is None:
            self._early[stream_id] = self._early.get(stream_id, 0) + 1
        else:
            run.mirrors += 1

    def let_go(self, stream_id: str) -> None:
        """A mirror of `stream_id` is done with it."""
        run = self._runs.get(stream_id)
        if run is not None:
            run.mirrors -= 1
            run.settle()
        elif (left := self._early.pop(stream_id, 0) - 1) > 0:
            self._early[stream_id] = left

    async def drain(self, grace: float) -> None:
        """A graceful stop, which keeps at least what a crash keeps: refuse new work, give the
        running generations `grace` seconds to end, then end each foreground one with a
        recorded `SHUT_DOWN` (its client receives it) and leave each background one
        unfinished, as a crash does: the next start continues it from its recorded tokens."""
        self.closing = True
        await self._recorded(grace)
        self._interrupted = True
        running = [r for r in self._runs.values() if not r.recorder.done]
        for run in running:
            self._interrupt(run)
        await self._recorded(10)  # a commit each; bounded, should writes fail
        if running:
            left = sum(r.background for r in running)
            log.warning(
                "stop: %d running generations cut short (%d ended for their clients, "
                "%d background ones go on at the next start)",
                len(running),
                len(running) - left,
                left,
            )

    async def _recorded(self, timeout: float) -> None:
        waits = [asyncio.ensure_future(r.recorded.wait()) for r in self._runs.values()]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=timeout)
            for wait in pending:
                wait.cancel()

    def _interrupt(self, run: Run) -> None:
        if run.recorder.done or run.interruption is not None:
            return
        kind = {"responses": "response", "messages": "message"}.get(run.api, "completion")
        run.interruption = Failed(SHUT_DOWN.format(kind))
        run.job.outputs.put_nowait(run.interruption)  # after what the engine sent so far
        run.job.cancel()

    async def close(self) -> None:
        await self.drain(0)
        self._closing.set()
        for run in self._runs.values():
            run.released.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)

    async def _record(self, run: Run) -> None:
        """Drain what the engine has sent into one append (group commit with the others)."""
        try:
            while not run.recorder.done and not run.detached:
                outputs = [await run.job.outputs.get()]
                while not run.job.outputs.empty():
                    outputs.append(run.job.outputs.get_nowait())
                if run.unwritten is not None:
                    break  # nothing after a failed append may be recorded
                await self._write(run, outputs)
        except StoreError as exc:
            self._stop_unwritten(run, exc)
        except Exception:
            log.exception("recording %s failed", run.stream_id)
        finally:
            if not run.recorder.done:
                run.job.cancel()
            run.recorded.set()
        if run.unwritten is not None:
            await self._end_unwritten(run)
        if not run.store:
            await self._purge(run)
        self._runs.pop(run.stream_id, None)
        # Done with, or left for the next start (a stop): another server may take it now.
        await self.leasing.release([run.stream_id, *run.leased])
        self._after_crash(run)

    def _after_crash(self, run: Run) -> None:
        """A background run whose engine died goes on (on_crash) once what was queued of it
        is in the log."""
        if not run.crashed:
            self._crashes.pop(run.stream_id, None)
        elif self.on_crash is not None:
            self._spawn(self._go_on(run.stream_id, self.on_crash), f"continue-{run.stream_id}")

    async def _go_on(self, stream_id: str, on_crash: Callable[[str], Awaitable[Any]]) -> None:
        try:
            await self.appender.append()  # after all it queued: committed in order
            await on_crash(stream_id)
        except Exception:  # left unfinished: the next start continues it
            log.exception("%s could not go on after its engine died", stream_id)

    async def _write(self, run: Run, outputs: list[Output]) -> None:
        """Record `outputs`: the ending committed before the recorder goes on, the rest queued."""
        recorder = run.recorder
        appends = self._appends(run, outputs)
        if not isinstance(recorder, ResponseRecorder) and recorder.wants_stop:
            run.job.cancel()  # a stop sequence: no need to generate further
        if recorder.done:
            observe(self.metrics, run, outputs)
            self._ended(run)
        if recorder.done and run.ending is not None:
            await run.ending(appends)
        elif recorder.done or (run.detached and appends):  # committed before we go on
            await self.appender.append(*appends)
        elif appends:
            written = self.appender.submit(*appends)
            written.add_done_callback(lambda done: self._check_written(run, done))

    async def _purge(self, run: Run) -> None:
        """An unstored run: keep the rows until their readers have read them, then purge."""
        await run.released.wait()
        await self.notifier.wait_idle(run.stream_id)
        try:
            await self.store.purge(streams_of([run.stream_id]))
        except StoreError as exc:  # start-up recovery purges what is left
            log.debug("purge of %s failed: %s", run.stream_id, exc)

    def _survives(self, run: Run) -> bool:
        """Whether `run` goes on after its engine died under it: a background run, continued
        once the model is loaded again, a few times at most."""
        if not run.background or self.on_crash is None or self.closing:
            return False
        crashes = self._crashes.get(run.stream_id, 0) + 1
        if crashes > CRASHES_SURVIVED:
            return False
        self._crashes[run.stream_id] = crashes
        log.warning(
            "the engine died under background response %s: it goes on once the model is "
            "loaded again",
            run.stream_id,
        )
        return True

    def _ended(self, run: Run) -> None:
        on_done, run.on_done = run.on_done, None
        if on_done is not None:
            on_done()

    def _check_written(self, run: Run, done: asyncio.Future[list[StoredEvent]]) -> None:
        if not done.cancelled() and (exc := done.exception()) is not None:
            self._stop_unwritten(run, exc)

    def _stop_unwritten(self, run: Run, exc: BaseException) -> None:
        """An append of the run's events failed: generating more is for nothing."""
        if run.unwritten is not None:
            return
        run.unwritten = exc
        run.job.cancel()
        # Wakes the recorder if it waits (an engine that took the job sends its own end too).
        run.job.outputs.put_nowait(Finished("cancelled", len(run.job.prompt), 0))

    async def _end_unwritten(self, run: Run) -> None:
        """End the run failed once appends work again; its followers read that ending."""
        if not run.recorder.done:
            self.metrics.generations.labels(run.api, "failed").inc()
        self._ended(run)
        if not await end_unwritten(self.store, self.appender, run.stream_id, self._closing):
            # The log is gone (or the server stops): followers must find that out now.
            self.notifier.notify([run.stream_id])
            run.released.set()

    def _appends(self, run: Run, outputs: list[Output]) -> list[Append]:
        events: list[Any] = []
        tokens: list[int] = []
        progress: list[NewEvent] = []
        for out in outputs:
            if run.recorder.done or run.detached:
                break  # e.g. the engine's own end after a cancel already recorded
            if isinstance(out, Prefilled):
                progress.append(self._progress(run, out))
                continue
            if out is run.interruption and run.background:
                run.detached = True  # no ending: the next start continues it
                break
            if isinstance(out, Failed) and out.crashed and self._survives(run):
                run.detached = run.crashed = True  # no ending: it goes on once the model is back
                break
            if out is run.interruption and isinstance(run.recorder, ResponseRecorder):
                events += run.recorder.on_abandoned(out.message)  # incomplete, what it said kept
                break
            if isinstance(out, Delta) and out.token is not None:
                tokens.append(out.token)
            events += run.recorder.on_output(out)
        if tokens and run.first_token_at is None:
            run.first_token_at = time.perf_counter()
            self.metrics.prefilling(run.stream_id, run.engine.model_id, None)
        rows = [
            NewEvent(e[0], dumps(e[1])) if isinstance(e, tuple) else NewEvent(e["type"], dumps(e))
            for e in events
        ]
        appends: list[Append] = []
        if rows:
            appends.append(Append(run.stream_id, run.next_seq, rows))
            run.next_seq += len(rows)
        return appends + self._sides(run, tokens, progress)

    def _progress(self, run: Run, out: Prefilled) -> NewEvent:
        self.metrics.prefilling(run.stream_id, run.engine.model_id, out.fed, out.total)
        return NewEvent(PREFILL_PROGRESS, dumps({"fed": out.fed, "total": out.total}))

    def _sides(self, run: Run, tokens: list[int], progress: list[NewEvent]) -> list[Append]:
        """The run's internal streams' appends: a long prefill's progress, and a background
        run's tokens (in the same transaction as its deltas: recorded tokens and recorded
        text never disagree)."""
        appends = []
        if progress:
            appends.append(Append(progress_stream(run.stream_id), run.progress_seq, progress))
            run.progress_seq += len(progress)
        if run.background and tokens:
            token_rows = [NewEvent(TOKENS, dumps(tokens))]
            appends.append(Append(tokens_stream(run.stream_id), run.tokens_seq, token_rows))
            run.tokens_seq += 1
        return appends
