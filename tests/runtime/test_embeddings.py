"""The MLX embedder: the real all-MiniLM-L6-v2 against sentence-transformers' own vectors, and
a tiny random BERT for batching (padded passes, requests embedded together)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni.errors import ModelLoadError, OmniError
from omni.runtime.embeddings.default import DEFAULT_EMBEDDING_ID
from omni.runtime.embeddings.engine import MLXEmbedder
from omni.runtime.embeddings.worker import passes

REFERENCE = json.loads((Path(__file__).parents[1] / "data" / "minilm_reference.json").read_text())


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> Iterator[MLXEmbedder]:
    embedder = MLXEmbedder(str(minilm_dir), DEFAULT_EMBEDDING_ID)
    embedder.start()
    yield embedder
    embedder.close()


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir: Path) -> Iterator[MLXEmbedder]:
    embedder = MLXEmbedder(str(tiny_bert_dir), "tiny-bert", max_batch=4)  # several passes
    embedder.start()
    yield embedder
    embedder.close()


async def test_minilm_matches_sentence_transformers(minilm: MLXEmbedder) -> None:
    caps = minilm.capabilities
    assert (caps.dimensions, caps.context_length, caps.vocab_size) == (384, 256, 30522)
    tokens = minilm.tokenize(REFERENCE["sentences"])
    assert [len(t) for t in tokens] == REFERENCE["tokens"]
    vectors = await minilm.embed(tokens)
    for ours, theirs in zip(vectors, REFERENCE["embeddings"], strict=True):
        assert len(ours) == 384
        assert cosine(ours, theirs) > 0.99
        assert math.isclose(sum(x * x for x in ours), 1.0, rel_tol=1e-5)


async def test_minilm_puts_the_cat_near_the_kitten(minilm: MLXEmbedder) -> None:
    cat, kitten, stocks = await minilm.embed(
        minilm.tokenize(
            ["a cat sits on the mat", "a kitten rests on a rug", "stock markets fell sharply"]
        )
    )
    assert cosine(cat, kitten) > cosine(cat, stocks) + 0.3


TEXTS = [
    "hello",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? The capital of France is Paris.",
    "Numbers like 12345 and 67890 appear in text too.",
    "Omni records every event",
    "fine",
    "Hello, how are you today? I am fine, thank you. " * 3,
    "dog",
    "Paris",
]


async def test_batched_vectors_equal_one_at_a_time(tiny: MLXEmbedder) -> None:
    tokens = tiny.tokenize(TEXTS)
    assert len({len(t) for t in tokens}) > 4  # lengths differ: the passes are padded
    together = await tiny.embed(tokens)
    for row, vector in zip(tokens, together, strict=True):
        (alone,) = await tiny.embed([row])
        assert max(abs(a - b) for a, b in zip(alone, vector, strict=True)) < 1e-4


async def test_concurrent_requests_are_answered_each_in_order(tiny: MLXEmbedder) -> None:
    tokens = tiny.tokenize(TEXTS)
    expected = await tiny.embed(tokens)
    requests = [tokens[i:] + tokens[:i] for i in range(len(tokens))]
    answers = await asyncio.gather(*(tiny.embed(r) for r in requests))
    assert tiny.running == 0
    for i, answer in enumerate(answers):
        rotated = expected[i:] + expected[:i]
        for got, want in zip(answer, rotated, strict=True):
            assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-4


def test_passes_sort_by_length_and_bound_batch_and_tokens() -> None:
    lengths = [5, 100, 7, 100, 6, 3, 90]
    groups = passes(lengths, max_batch=2, max_tokens=250)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert groups[0] == [1, 3]  # the longest together
    for group in groups:
        assert len(group) <= 2
        assert max(lengths[i] for i in group) * len(group) <= 250 or len(group) == 1
    assert passes([300], max_batch=64, max_tokens=100) == [[0]]  # too long alone: still one
    assert passes([], 64) == []


def test_a_model_that_cannot_load_is_a_clear_error(tmp_path: Path, tiny_bert_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="no config.json"):
        MLXEmbedder(str(tmp_path), "nothing").start()
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (broken / name).write_bytes((tiny_bert_dir / name).read_bytes())
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ModelLoadError, match=f"cannot load embedding model {broken}") as err:
        MLXEmbedder(str(broken), "broken").start()
    assert "\n" not in err.value.message


async def test_a_dead_process_fails_what_is_asked_of_it(tiny_bert_dir: Path) -> None:
    embedder = MLXEmbedder(str(tiny_bert_dir), "tiny-bert")
    embedder.start()
    try:
        os.kill(embedder._process.pid, signal.SIGKILL)
        embedder._process.join()
        with pytest.raises(OmniError, match="exited unexpectedly|gone"):
            await embedder.embed(embedder.tokenize(["hello"]))
        with pytest.raises(OmniError):
            await embedder.embed(embedder.tokenize(["again"]))
    finally:
        embedder.close()
