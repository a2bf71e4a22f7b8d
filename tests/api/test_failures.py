"""Generation failures, with a scripted engine (the real one does not fail on demand)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from omni.api.app import Settings
from omni.ports.chat import Capabilities
from omni.ports.jobs import Delta, Failed, Job, Output
from tests.server import ServerThread


class ScriptedEngine:
    """Emits a fixed script of outputs for every job; counts the jobs it ran."""

    model_id = "scripted"
    capabilities = Capabilities(context_length=1024, max_token_bytes=16)  # a plain model
    queued = running = 0
    loading, load_error, memory_bytes, path = False, None, None, ""  # loaded; nothing to measure
    on_step = None

    def __init__(self) -> None:
        self.script: list[Output] = []
        self.jobs = 0

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        return [1, 2, 3]

    def submit(self, job: Job) -> None:
        self.jobs += 1
        loop = asyncio.get_running_loop()
        for out in self.script:
            loop.call_soon(job.outputs.put_nowait, out)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ScriptedEngine, str]]:
    engine = ScriptedEngine()
    db = tmp_path_factory.mktemp("failures") / "omni.db"
    srv = ServerThread(Settings(db_path=str(db)), engine).start()
    yield engine, srv.base_url
    srv.stop()


def test_non_stream_failure_is_a_5xx_that_the_sdk_does_not_retry(scripted) -> None:
    engine, base = scripted
    engine.script = [Failed("generation failed: out of memory")]
    before = engine.jobs
    raw = httpx.post(f"{base}/v1/responses", json={"input": "hi"})
    assert raw.status_code == 500
    assert raw.headers["x-should-retry"] == "false"
    assert raw.json()["error"]["message"] == "generation failed: out of memory"
    assert raw.json()["error"]["code"] == "server_error"
    import openai

    with OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=2) as sdk:  # default retries
        with pytest.raises(openai.InternalServerError):
            sdk.responses.create(model="scripted", input="hi")
    assert engine.jobs == before + 2  # one generation per call, no retries


def test_mid_stream_failure_ends_with_response_failed(scripted) -> None:
    engine, base = scripted
    engine.script = [Delta("Hel", 10), Delta("lo", 11), Failed("generation failed: boom")]
    with OpenAI(
        base_url=f"{base}/v1", api_key="x", max_retries=0, _strict_response_validation=True
    ) as sdk:
        events = list(sdk.responses.create(model="scripted", input="hi", stream=True))
        assert [e.sequence_number for e in events] == list(range(len(events)))
        last = events[-1]
        assert last.type == "response.failed"
        assert last.response.status == "failed"
        assert last.response.error.code == "server_error"
        assert last.response.output[0].content[0].text == "Hello"
        assert last.response.output[0].status == "incomplete"
        stored = sdk.responses.retrieve(last.response.id)
        assert stored.status == "failed" and stored.output_text == "Hello"
        with sdk.responses.stream(model="scripted", input="hi") as stream:
            with pytest.raises(RuntimeError):
                stream.get_final_response()


async def test_a_run_whose_opening_cannot_be_committed_is_cancelled_not_left_running() -> None:
    """The engine starts on a job while its opening events commit; if that commit fails,
    the job is cancelled (nobody would record it) and the error reaches the caller."""
    from omni.events import Append, NewEvent
    from omni.ports.jobs import Sampling
    from omni.protocol.chat_recorder import ChunkRecorder
    from omni.service.run import Run
    from omni.service.runs import Runs

    class FullDisk:
        async def append(self, *appends: Append) -> None:
            await asyncio.sleep(0)
            raise OSError("database or disk is full")

    engine = ScriptedEngine()
    runs = Runs(None, FullDisk(), None)  # type: ignore[arg-type]
    job = Job([1, 2, 3], Sampling(max_tokens=4))
    run = Run("chatcmpl-1", ChunkRecorder("chat", "chatcmpl-1", "scripted", 0), job, engine)
    with pytest.raises(OSError, match="disk is full"):
        await runs.open(run, Append("chatcmpl-1", 0, [NewEvent("chunk", "{}")]))
    assert engine.jobs == 1  # it had started...
    assert job.stop.is_set()  # ... and is told to stop
    assert runs.get("chatcmpl-1") is None  # never recorded, never listed
