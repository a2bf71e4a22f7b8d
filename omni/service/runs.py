"""Running generations: the recorder loop that turns engine outputs into appended events.

The generator itself writes the log (not the HTTP reader), so a response goes on, and is
recorded, whoever is or is not listening.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from omni.engine.recorder import ResponseRecorder
from omni.engine.types import Delta, Engine, Finished, Job, Output
from omni.events import Append, Appender, EventStore, NewEvent, Notifier
from omni.service.streams import TOKENS, dumps, request_stream, tokens_stream

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Run:
    response_id: str
    recorder: ResponseRecorder
    job: Job
    store: bool = True
    background: bool = False
    tokens_seq: int = 0  # next seq of resp_X/tokens (background runs record their tokens)
    # store:false runs: set once the creating client has read all it wanted.
    released: asyncio.Event = field(default_factory=asyncio.Event)


class Runs:
    """The generations in flight in this process, by response id."""

    def __init__(self, engine: Engine, store: EventStore, appender: Appender, notifier: Notifier):
        self.engine = engine
        self.store = store
        self.appender = appender
        self.notifier = notifier
        self._runs: dict[str, Run] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, run: Run) -> None:
        self._runs[run.response_id] = run
        task = asyncio.create_task(self._record(run), name=f"record-{run.response_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.engine.submit(run.job)

    def get(self, response_id: str) -> Run | None:
        return self._runs.get(response_id)

    def cancel(self, response_id: str) -> None:
        """Stop at the next token; a run the engine has not taken yet ends at once."""
        run = self._runs.get(response_id)
        if run is None:
            return
        if run.job.cancel():  # the engine never took it: end it here, at once
            done = len(run.job.resume_tokens)
            run.job.outputs.put_nowait(Finished("cancelled", len(run.job.prompt), done))

    def release(self, response_id: str) -> None:
        """The creating client is done with the stream (read to the end, or gone)."""
        run = self._runs.get(response_id)
        if run is not None:
            run.released.set()

    async def close(self) -> None:
        for run in self._runs.values():
            run.job.cancel()
            run.released.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)

    async def _record(self, run: Run) -> None:
        """Drain what the engine has sent into one append (group commit with the others)."""
        recorder = run.recorder
        try:
            while not recorder.done:
                outputs = [await run.job.outputs.get()]
                while not run.job.outputs.empty():
                    outputs.append(run.job.outputs.get_nowait())
                appends = self._appends(run, outputs)
                if recorder.done:
                    await self.appender.append(*appends)
                elif appends:
                    self.appender.submit(*appends)
        except Exception:
            log.exception("recording %s failed", run.response_id)
        finally:
            if not recorder.done:
                run.job.cancel()
        if not run.store:
            # Keep the rows until the creating client has read them, then purge on purpose.
            await run.released.wait()
            await self.notifier.wait_idle(run.response_id)
            await self.store.purge([run.response_id, request_stream(run.response_id)])
        self._runs.pop(run.response_id, None)

    def _appends(self, run: Run, outputs: list[Output]) -> list[Append]:
        first = run.recorder.next_seq
        events, tokens = [], []
        for out in outputs:
            if run.recorder.done:
                break  # e.g. the engine's own end after a cancel already recorded
            if isinstance(out, Delta) and out.token is not None:
                tokens.append(out.token)
            events += run.recorder.on_output(out)
        appends = []
        if events:
            rows = [NewEvent(e["type"], dumps(e)) for e in events]
            appends.append(Append(run.response_id, first, rows))
        if run.background and tokens:
            # Same transaction as the deltas: recorded tokens and recorded text never disagree.
            rows = [NewEvent(TOKENS, dumps(tokens))]
            appends.append(Append(tokens_stream(run.response_id), run.tokens_seq, rows))
            run.tokens_seq += 1
        return appends
