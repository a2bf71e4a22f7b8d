"""The engine process (omni.runtime.chat.worker) seen from the server: its outputs arrive as values,
a cancel crosses the process boundary, and losing the process fails the jobs in flight with a
clear message instead of leaving their streams hanging."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from omni.errors import ModelLoadError
from omni.ports.jobs import Delta, Failed, Finished, Job, Output, Sampling, Started
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.source import ModelSource

GREEDY_LONG = Sampling(temperature=0.0, max_tokens=2000, logit_bias=((2, -100.0),))


@pytest.fixture
def engine(tiny_model_dir: Path) -> Iterator[MLXEngine]:
    engine = MLXEngine(ModelSource(str(tiny_model_dir), "tiny"))
    engine.start()
    yield engine
    engine.close()


async def drain(job: Job, timeout: float = 60) -> list[Output]:
    outputs: list[Output] = []
    while not outputs or not isinstance(outputs[-1], Finished | Failed):
        outputs.append(await asyncio.wait_for(job.outputs.get(), timeout))
    return outputs


def test_a_job_runs_in_the_engine_process_and_its_text_is_decoded_here(engine: MLXEngine) -> None:
    prompt = engine.encode("The quick brown fox")

    async def go() -> list[Output]:
        job = Job(prompt, Sampling(temperature=0.0, max_tokens=12, logit_bias=((2, -100.0),)))
        engine.submit(job)
        return await drain(job)

    outputs = asyncio.run(go())
    assert isinstance(outputs[0], Started)
    deltas = [o for o in outputs if isinstance(o, Delta)]
    tokens = [d.token for d in deltas if d.token is not None]
    assert len(tokens) == 12
    end = outputs[-1]
    assert isinstance(end, Finished) and end.reason == "length"
    assert (end.prompt_tokens, end.completion_tokens) == (len(prompt), 12)
    # The text handed over is exactly mlx-lm's streaming decoding of the tokens that came back.
    detokenizer = engine._tokenizer.detokenizer
    for token in tokens:
        detokenizer.add_token(token)
    detokenizer.finalize()
    assert "".join(d.text for d in deltas) == detokenizer.text
    assert engine.generations >= 1 and engine.queued == 0


def test_a_cancel_reaches_the_engine_process(engine: MLXEngine) -> None:
    async def go() -> list[Output]:
        job = Job(engine.encode("Hello"), GREEDY_LONG)
        engine.submit(job)
        outputs = [await asyncio.wait_for(job.outputs.get(), 30) for _ in range(4)]
        assert job.cancel() is False  # the engine took it: the engine ends it
        return outputs + await drain(job)

    outputs = asyncio.run(go())
    end = outputs[-1]
    assert isinstance(end, Finished) and end.reason == "cancelled"
    assert end.completion_tokens < 2000


def test_a_cancel_after_the_end_came_back_sends_nothing(engine: MLXEngine) -> None:
    """A finished request's clean-up cancels its job: nothing crosses the pipe for it."""
    sent: list[Any] = []
    send = engine._send
    engine._send = lambda message: (sent.append(message), send(message))[1]  # type: ignore[method-assign]

    async def go() -> None:
        job = Job(engine.encode("Hello"), Sampling(temperature=0.0, max_tokens=3))
        engine.submit(job)
        await drain(job)
        job.cancel()

    asyncio.run(go())
    assert [type(m).__name__ for m in sent] == ["Spec"]


def test_losing_the_engine_process_fails_running_and_later_jobs(engine: MLXEngine) -> None:
    async def go() -> tuple[list[Output], list[Output]]:
        job = Job(engine.encode("Hello"), GREEDY_LONG)
        engine.submit(job)
        await asyncio.wait_for(job.outputs.get(), 30)  # Started
        engine._process.kill()
        running = await drain(job)
        later = Job(engine.encode("Hello"), GREEDY_LONG)
        engine.submit(later)
        return running, await drain(later, timeout=5)

    running, later = asyncio.run(go())
    for outputs in (running, later):
        assert isinstance(outputs[-1], Failed)
        assert "engine process exited" in outputs[-1].message


def test_a_model_that_cannot_load_is_reported_by_the_engine_process(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    engine = MLXEngine(ModelSource(str(tmp_path), "broken"))
    with pytest.raises(ModelLoadError, match="cannot load model"):
        engine.start()


def test_a_job_started_alone_carries_on_in_the_batch_when_another_joins(engine: MLXEngine) -> None:
    """The first job runs alone (generate_step); when a second arrives it moves into the batch
    with its KV cache. Its greedy tokens must not change at the seam, and the joiner's tokens
    must be its own."""
    sampling = Sampling(temperature=0.0, max_tokens=300, logit_bias=((2, -100.0),))
    first, second = engine.encode("The quick brown fox"), engine.encode("Hello, how are")

    def tokens(outputs: list[Output]) -> list[int]:
        return [o.token for o in outputs if isinstance(o, Delta) and o.token is not None]

    async def go() -> tuple[list[int], list[int], list[int], list[int]]:
        alone = Job(first, sampling, cache_namespace="alone")
        engine.submit(alone)
        alone_tokens = tokens(await drain(alone))
        other = Job(second, sampling, cache_namespace="other-alone")
        engine.submit(other)
        other_tokens = tokens(await drain(other))

        joined = Job(first, sampling, cache_namespace="joined")
        engine.submit(joined)
        seen = [await asyncio.wait_for(joined.outputs.get(), 30) for _ in range(11)]
        joiner = Job(second, sampling, cache_namespace="joiner")
        engine.submit(joiner)  # arrives while `joined` decodes alone
        rest, joiner_out = await asyncio.gather(drain(joined), drain(joiner))
        return alone_tokens, tokens(seen + rest), other_tokens, tokens(joiner_out)

    alone, joined, other, joiner = asyncio.run(go())
    assert len(alone) == 300 and joined == alone
    assert joiner == other


def test_a_job_cancelled_while_it_waits_never_runs(engine: MLXEngine) -> None:
    """With room for one, B waits behind A; B is cancelled, then A. B must leave the queue for
    good: the next job starts at once instead of waiting behind a cancelled B."""

    async def go() -> None:
        engine.max_batch = 1
        a = Job(engine.encode("decode"), GREEDY_LONG)
        engine.submit(a)
        assert isinstance(await asyncio.wait_for(a.outputs.get(), 30), Started)
        b = Job(engine.encode("wait"), GREEDY_LONG)
        engine.submit(b)
        assert b.cancel() is False
        end = (await drain(b))[-1]
        assert isinstance(end, Finished) and end.completion_tokens == 0
        a.cancel()
        await drain(a)
        generations = engine.generations
        c = Job(engine.encode("again"), GREEDY_LONG)
        engine.submit(c)
        assert isinstance(await asyncio.wait_for(c.outputs.get(), 5), Started)
        assert engine.generations == generations + 1
        c.cancel()
        await drain(c)

    asyncio.run(go())


def test_the_engine_runs_without_cudnn_attention_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MLX's cuDNN attention builds a graph per new shape (bench/attention.py, in git
    history): the engine turns it off, unless the environment says otherwise."""
    from omni.runtime.chat.worker import use_mlx_settings

    monkeypatch.setenv("MLX_CUDA_USE_CUDNN_SDPA", "")  # put back as it was after the test
    monkeypatch.delenv("MLX_CUDA_USE_CUDNN_SDPA")
    use_mlx_settings()
    assert os.environ["MLX_CUDA_USE_CUDNN_SDPA"] == "0"
    monkeypatch.setenv("MLX_CUDA_USE_CUDNN_SDPA", "1")
    use_mlx_settings()
    assert os.environ["MLX_CUDA_USE_CUDNN_SDPA"] == "1"


def test_the_engine_prefills_bigger_groups_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompts prefilled together: mlx-lm's 8 on a CPU (or Metal), CUDA_PREFILL_GROUP on an
    NVIDIA GPU (bench/concurrency.py); OMNI_PREFILL_GROUP sets it (benchmarks)."""
    from omni.runtime.chat import worker
    from omni.runtime.chat.state import PREFILL_GROUP
    from omni.settings import engine_knobs

    def prefill_group(env: dict[str, str] | None = None) -> int:
        return worker.prefill_group(engine_knobs(env)["prefill_group"])

    monkeypatch.delenv("OMNI_PREFILL_GROUP", raising=False)
    monkeypatch.setattr(worker, "on_cuda", lambda: False)
    assert prefill_group() == PREFILL_GROUP == 8
    monkeypatch.setattr(worker, "on_cuda", lambda: True)
    assert prefill_group() == worker.CUDA_PREFILL_GROUP == 16
    monkeypatch.setenv("OMNI_PREFILL_GROUP", "4")
    assert prefill_group() == 4
    monkeypatch.setenv("OMNI_PREFILL_GROUP", "")  # set but empty: as if unset
    assert prefill_group() == 16
    assert prefill_group({"OMNI_PREFILL_GROUP": "3"}) == 3  # another environment's


@pytest.mark.parametrize("value", ["0", "-1", "eight"])
def test_a_prefill_group_that_is_no_positive_integer_stops_the_engine_with_its_name(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """A group of 0 would never start a prompt (jobs would hang): the engine refuses to start,
    and says why."""
    monkeypatch.setenv("OMNI_PREFILL_GROUP", value)
    with pytest.raises(ModelLoadError, match="OMNI_PREFILL_GROUP must be a positive integer"):
        MLXEngine(ModelSource(str(tiny_model_dir), "tiny")).start()


def test_the_prefill_chunk_is_the_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompt tokens a step feeds one prompt: 128 on a CPU, 2,048 on a GPU (bench/chunks.py);
    OMNI_PREFILL_CHUNK sets it (tests, benchmarks)."""
    from omni.runtime.chat import worker
    from omni.settings import engine_knobs

    def prefill_chunk(env: dict[str, str] | None = None) -> int:
        return worker.prefill_chunk(engine_knobs(env)["prefill_chunk"])

    monkeypatch.delenv("OMNI_PREFILL_CHUNK", raising=False)
    monkeypatch.setattr(worker, "on_gpu", lambda: False)
    assert prefill_chunk() == worker.CPU_PREFILL_CHUNK == 128
    monkeypatch.setattr(worker, "on_gpu", lambda: True)
    assert prefill_chunk() == worker.GPU_PREFILL_CHUNK == 2048
    assert prefill_chunk({"OMNI_PREFILL_CHUNK": "16"}) == 16


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_prefill_chunk_that_is_no_positive_integer_stops_the_engine_with_its_name(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OMNI_PREFILL_CHUNK", value)
    with pytest.raises(ModelLoadError, match="OMNI_PREFILL_CHUNK must be a positive integer"):
        MLXEngine(ModelSource(str(tiny_model_dir), "tiny")).start()


def test_close_returns_after_the_reader_is_done_with_the_pipe(tiny_model_dir: Path) -> None:
    """close() closes the pipe only once the reader thread has left it (it used to close it
    under a recv in progress now and then: TypeError in the reader at shutdown)."""
    engine = MLXEngine(ModelSource(str(tiny_model_dir), "tiny"))
    engine.start()
    deliver = engine._deliver

    def slow(outputs: list[Any]) -> None:  # the reader's last steps, after the pipe's end
        time.sleep(0.3)
        deliver(outputs)

    engine._deliver = slow  # type: ignore[method-assign]
    engine.close()
    assert not engine._reader.is_alive()
