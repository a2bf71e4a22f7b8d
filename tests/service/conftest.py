"""The services on the in-memory store with a scripted engine: commands and queries as the API
calls them, without HTTP (real sockets are for SSE framing, disconnects and crashes:
tests/api/)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from omni.events import Appender, MemoryStore, Notifier
from omni.ports.chat import Capabilities
from omni.ports.jobs import Delta, Failed, Finished, Job, Output, Started
from omni.service.completions import CompletionsService
from omni.service.leasing import Leasing
from omni.service.responses import ResponsesService
from omni.service.stored import StoredCompletions
from omni.settings import ServerSettings


class ScriptedEngine:
    """Each job streams the next script; one that does not end (no Finished or Failed) holds
    its job until it is cancelled, as a real engine stops at the next token."""

    model_id = "scripted"
    capabilities = Capabilities(context_length=1024, max_token_bytes=16)  # a plain model
    queued = running = 0
    loading, load_error, memory_bytes, path = False, None, None, ""  # loaded; nothing to measure
    on_step = None

    def __init__(self) -> None:
        self.scripts: list[list[Output]] = []
        self.jobs: list[Job] = []
        self.rendered: list[list[dict[str, Any]]] = []  # the chat messages of each prompt

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        thinking: bool | None = None,
    ) -> list[int]:
        self.rendered.append(messages)
        return [1, 2, 3]

    def opens_thinking(self, prompt: list[int]) -> bool:
        return False

    def segments(self, tokens: list[int]) -> list[str]:
        return [f"<{t}>" for t in tokens]

    def encode(self, text: str) -> list[int]:
        return [1, 2, 3]

    def submit(self, job: Job) -> None:
        assert job.claim()
        self.jobs.append(job)
        script = self.scripts.pop(0)
        for out in (Started(), *script):
            job.outputs.put_nowait(out)
        if not script or not isinstance(script[-1], Finished | Failed):
            said = sum(isinstance(out, Delta) for out in script)
            job.on_cancel = lambda: job.outputs.put_nowait(
                Finished("cancelled", len(job.prompt), said)
            )

    def close(self) -> None:
        pass


@dataclass
class Services:
    store: MemoryStore
    engine: ScriptedEngine
    responses: ResponsesService
    completions: CompletionsService
    stored: StoredCompletions


@asynccontextmanager
async def serving(
    store: MemoryStore,
    engine: ScriptedEngine,
    leasing: Leasing | None = None,
    notifier: Notifier | None = None,
    store_by_default: bool = ServerSettings.store_by_default,
) -> AsyncIterator[Services]:
    """The services over `store`, wired as the app wires them, recovered, then closed
    (`leasing`, `notifier`: a server's among several sharing the store)."""
    notifier = notifier or Notifier()
    appender = Appender(store, notifier)
    appender.start()
    responses = ResponsesService(store, appender, notifier, engine)
    if leasing is not None:
        responses.runs.leasing = leasing
    completions = CompletionsService(
        store,
        appender,
        notifier,
        engine,
        responses.runs,
        prompter=responses.prompter,
        store_by_default=store_by_default,
    )
    await responses.recover()
    await completions.recover()
    try:
        yield Services(store, engine, responses, completions, StoredCompletions(store, appender))
    finally:
        await completions.close()
        await responses.close()
        await appender.stop()


@pytest.fixture
async def services() -> AsyncIterator[Services]:
    async with serving(MemoryStore(), ScriptedEngine()) as served:
        yield served


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An empty SQLite log, migrated once for the run: tests copy it (a migration takes ~0.5 s)."""
    from omni.db import upgrade

    path = tmp_path_factory.mktemp("migrated") / "omni.db"
    upgrade(str(path))
    return path


@pytest.fixture
async def logged(migrated: Any, tmp_path: Any) -> AsyncIterator[Services]:
    """The services on a migrated SQLite file, whose rows a test may count (store.path)."""
    import shutil

    from omni.events import EventStore

    path = str(tmp_path / "omni.db")
    shutil.copyfile(migrated, path)
    store = EventStore(path)
    await store.open()
    try:
        async with serving(store, ScriptedEngine()) as served:
            yield served
    finally:
        await store.close()


def high_water(services: Services) -> int:
    """The log's AUTOINCREMENT mark (on `logged`): it moves with every row ever appended."""
    import sqlite3

    with sqlite3.connect(services.store.path) as conn:
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    return int(row[0])


class OneAtATime(ScriptedEngine):
    """A scripted engine that decodes one job at a time: the others wait in its queue,
    unclaimed, each taking the next script when it is reached; one cancelled while it waited
    is skipped then (it never runs). `generations`: the jobs that ran."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[Job] = []
        self.current: Job | None = None

    @property  # type: ignore[override]
    def queued(self) -> int:
        return len(self.waiting)

    @property
    def generations(self) -> int:
        return len(self.jobs)

    def submit(self, job: Job) -> None:
        self.waiting.append(job)
        self._next()

    def _next(self) -> None:
        while self.current is None and self.waiting:
            job = self.waiting.pop(0)
            if not job.claim():
                continue  # cancelled while it waited: the service has ended it
            self.jobs.append(job)
            script = self.scripts.pop(0)
            for out in (Started(), *script):
                job.outputs.put_nowait(out)
            if script and isinstance(script[-1], Finished | Failed):
                continue  # done: the next one may start
            self.current = job
            said = sum(isinstance(out, Delta) for out in script)
            job.on_cancel = lambda job=job, said=said: self._stopped(job, said)

    def _stopped(self, job: Job, said: int) -> None:
        job.outputs.put_nowait(Finished("cancelled", len(job.prompt), said))
        self.current = None
        self._next()
