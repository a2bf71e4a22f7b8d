"""An engine handed over while its weights load: prompts render at once, jobs submitted
meanwhile wait in order and run once the weights are in; weights that fail to load end what
waits, naming the model (the reason goes to the log); a close while loading lets the process go."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from omni.errors import ModelLoadError
from omni.ports.jobs import Delta, Failed, Finished, Job, Output, Sampling
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.source import ModelSource


async def outputs(job: Job) -> list[Output]:
    got: list[Output] = []
    while not got or not isinstance(got[-1], Finished | Failed):
        got.append(await asyncio.wait_for(job.outputs.get(), 120))
    return got


async def test_jobs_submitted_while_the_weights_load_run_once_they_are_in(
    tiny_model_dir: Path,
) -> None:
    engine = MLXEngine(ModelSource(str(tiny_model_dir), "tiny-llama"))
    engine.begin()
    try:
        assert engine.capabilities.context_length > 0  # known from the config, at once
        prompt = engine.render([{"role": "user", "content": "Hi"}], [])
        jobs = [Job(prompt, Sampling(temperature=0, max_tokens=4)) for _ in range(2)]
        for job in jobs:
            engine.submit(job)
        ends = [await outputs(job) for job in jobs]
        assert not engine.loading and engine.load_error is None
        # What the pool budgets: the weights as the engine runs them, near their size on disk.
        on_disk = (tiny_model_dir / "model.safetensors").stat().st_size
        assert engine.memory_bytes is not None
        assert on_disk // 2 <= engine.memory_bytes <= on_disk * 8, (engine.memory_bytes, on_disk)
        for got in ends:
            assert isinstance(got[-1], Finished) and got[-1].completion_tokens == 4
            assert sum(isinstance(o, Delta) and o.token is not None for o in got) == 4
    finally:
        engine.close()


async def test_weights_that_fail_to_load_end_what_waits(
    tiny_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"\0" * 64)
    engine = MLXEngine(ModelSource(str(broken), "broken"))
    engine.begin()  # the tokenizer loads: the request is taken in
    try:
        job = Job(engine.render([{"role": "user", "content": "Hi"}], []), Sampling(max_tokens=2))
        engine.submit(job)
        got = await outputs(job)
        # What the request reads names the model; why (the path, the exception) is the log's.
        assert isinstance(got[-1], Failed)
        assert got[-1].message == ModelLoadError.of("broken").message
        assert f"cannot load model {broken}: " in caplog.text
        assert engine.load_error is not None and not engine.loading
    finally:
        engine.close()


def test_a_close_while_the_weights_load_lets_the_process_go(tiny_model_dir: Path) -> None:
    engine = MLXEngine(ModelSource(str(tiny_model_dir), "tiny-llama"))
    engine.begin()
    engine.close()
    assert engine._process is None
