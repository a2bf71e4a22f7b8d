"""A model folder's generation_config.json: the sampling it recommends is read by the engine
process, sent with Loaded and carried on the model's Capabilities, which the service reads."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from omni.ports.chat import RecommendedSampling
from omni.runtime.chat import wire, worker
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.chat.generation_config import recommended_sampling
from omni.runtime.loading.source import ModelSource
from omni.settings import EngineSettings
from omni.testing.llama import build_tiny_llama

# As Qwen3's is: every key the server takes, and others it leaves alone.
QWEN_LIKE = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
    "min_p": 0,
    "repetition_penalty": 1.05,
    "transformers_version": "4.51.0",
}
ADVISED = RecommendedSampling(
    temperature=0.6, top_p=0.95, top_k=20, min_p=0.0, repetition_penalty=1.05
)


def _folder(tmp_path: Path, config: Any) -> Path:
    text = config if isinstance(config, str) else json.dumps(config)
    (tmp_path / "generation_config.json").write_text(text)
    return tmp_path


def test_the_keys_a_request_could_set_are_read(tmp_path: Path) -> None:
    assert recommended_sampling(_folder(tmp_path, QWEN_LIKE)) == ADVISED


def test_no_file_or_an_unreadable_one_recommends_nothing(tmp_path: Path) -> None:
    assert recommended_sampling(tmp_path) == RecommendedSampling()
    for text in ("{not json", "[0.7]", '"temperature"', "\xff"):
        assert recommended_sampling(_folder(tmp_path, text)) == RecommendedSampling()
    # SmolLM2's own: token ids and no sampling at all
    plain = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
    assert recommended_sampling(_folder(tmp_path, plain)) == RecommendedSampling()


def test_do_sample_false_is_greedy(tmp_path: Path) -> None:
    """transformers decodes greedily then, ignoring temperature and the top-p/k/min-p cuts
    (a repetition penalty still applies)."""
    greedy = {**QWEN_LIKE, "do_sample": False}
    assert recommended_sampling(_folder(tmp_path, greedy)) == RecommendedSampling(
        temperature=0.0, repetition_penalty=1.05
    )
    alone = {"do_sample": False}
    assert recommended_sampling(_folder(tmp_path, alone)) == RecommendedSampling(temperature=0.0)
    unsaid = {"temperature": 0.7}  # no do_sample: the values are meant (as vLLM reads them)
    assert recommended_sampling(_folder(tmp_path, unsaid)) == RecommendedSampling(temperature=0.7)


def test_a_value_no_request_could_set_is_left_out(tmp_path: Path) -> None:
    odd = {"temperature": 3.5, "top_p": 0, "top_k": 2.5, "min_p": "0.1", "repetition_penalty": -1}
    assert recommended_sampling(_folder(tmp_path, odd)) == RecommendedSampling()
    mixed = {"temperature": True, "top_p": 0.8, "top_k": 40.0, "repetition_penalty": 1.0}
    # 1.0 is no penalty at all: left out, as a request that sets none (no per-step cost)
    assert recommended_sampling(_folder(tmp_path, mixed)) == RecommendedSampling(
        top_p=0.8, top_k=40
    )


@pytest.fixture(scope="module")
def advised_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose generation_config.json recommends sampling."""
    folder = build_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-advised", layers=1)
    (folder / "generation_config.json").write_text(json.dumps(QWEN_LIKE))
    return folder


def test_the_engine_process_sends_it_with_loaded(advised_model: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    conn, child = ctx.Pipe()
    process = ctx.Process(target=worker.main, args=(child, str(advised_model), EngineSettings()))
    process.start()
    child.close()
    try:
        loaded = conn.recv()
        conn.send(wire.Close())
    finally:
        process.join(60)
        if process.is_alive():
            process.kill()
    assert isinstance(loaded, wire.Loaded), loaded
    assert loaded.sampling == ADVISED


@pytest.fixture(scope="module")
def engine(advised_model: Path) -> Iterator[MLXEngine]:
    engine = MLXEngine(ModelSource(str(advised_model), "tiny-advised"))
    engine.start()
    yield engine
    engine.close()


def test_it_reaches_the_models_capabilities(engine: MLXEngine) -> None:
    assert engine.capabilities.sampling == ADVISED
    assert engine.capabilities.context_length == 2048  # the rest as it was
