"""Requests that arrive together reach the engine saying how many are still behind them, so an
idle engine prefills them together (omni.service.intake; the engine's side:
tests/runtime/test_gather.py). Through the real server, the async SDK and the tiny model; the
prompt renders are held until every request is taken in, so that all of them are."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI, BadRequestError, OpenAI

from omni.api.app import Settings
from omni.ports.jobs import Job
from omni.runtime.chat.engine import MLXEngine
from tests.api._helpers import MODEL
from tests.server import ServerThread

N = 5


class Watched:
    """The tiny engine, noting what each job said of the requests behind it; its renders
    wait (on the prompt thread) until `together` requests are taken in at once."""

    def __init__(self, engine: MLXEngine):
        self._engine = engine
        self.behind: list[int] = []
        self.intake: Any = None  # the server's, once it serves
        self.together = N

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def render(self, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 30
        while self.intake.taking + len(self.behind) < self.together:
            if time.monotonic() > deadline:
                raise TimeoutError("the requests were not taken in together")
            time.sleep(0.005)
        return self._engine.render(*args, **kwargs)

    def submit(self, job: Job) -> None:
        self.behind.append(job.behind)
        self._engine.submit(job)


@pytest.fixture
def watched(tiny_engine: MLXEngine, tmp_path: Path) -> Iterator[tuple[ServerThread, Watched]]:
    engine = Watched(tiny_engine)
    server = ServerThread(Settings(db_path=str(tmp_path / "omni.db")), engine).start()
    engine.intake = server.state.responses.runs.intake
    yield server, engine
    server.stop()


def at_once(server: ServerThread, create: Any) -> list[Any]:
    async def main() -> list[Any]:
        async with AsyncOpenAI(
            base_url=f"{server.base_url}/v1", api_key="test", max_retries=0
        ) as client:
            return await asyncio.gather(*(create(client, i) for i in range(N)))

    return asyncio.run(main())


def test_chat_requests_at_once_say_who_is_behind(watched: tuple[ServerThread, Watched]) -> None:
    server, engine = watched

    async def create(client: AsyncOpenAI, i: int) -> Any:
        return await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"request {i}"}],
            max_tokens=3,
            temperature=0,
            extra_headers={"Cache-Control": "no-cache"},
        )

    answers = at_once(server, create)
    # Each job left the intake in turn: the first had the other four behind it, the last none.
    assert engine.behind == list(range(N - 1, -1, -1))
    assert all(a.choices[0].finish_reason == "length" for a in answers)
    assert engine.intake.taking == 0


def test_responses_at_once_say_who_is_behind(watched: tuple[ServerThread, Watched]) -> None:
    server, engine = watched

    async def create(client: AsyncOpenAI, i: int) -> Any:
        return await client.responses.create(
            model=MODEL, input=f"request {i}", max_output_tokens=3, temperature=0
        )

    answers = at_once(server, create)
    assert engine.behind == list(range(N - 1, -1, -1))
    assert all(a.status == "incomplete" for a in answers)


def test_one_alone_has_nobody_behind(watched: tuple[ServerThread, Watched]) -> None:
    server, engine = watched
    engine.together = 1
    with OpenAI(base_url=f"{server.base_url}/v1", api_key="t", max_retries=0) as client:
        with pytest.raises(BadRequestError):  # refused before it made a job: it leaves too
            client.responses.create(model=MODEL, input="x", max_output_tokens=0)
        assert engine.intake.taking == 0
        client.responses.create(model=MODEL, input="alone", max_output_tokens=2)
    assert engine.behind == [0]
    assert engine.intake.taking == 0
