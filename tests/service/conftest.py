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

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        thinking: bool | None = None,
    ) -> list[int]:
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
