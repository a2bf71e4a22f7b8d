"""POST /v1/embeddings end to end: the OpenAI SDK against a real server embedding with the real
all-MiniLM-L6-v2 (the default embedding model, from its wheel), its requests in the log and
seen by the inspector, /metrics, and a rebuild of the projection from the log.

The server's model pool (omni.service.models) is not this test's: a minimal one stands in,
serving the MiniLM embedder by its id and an alias, and calling the tiny llama a chat model."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from alembic import command

from omni.db import alembic_config
from omni.errors import InvalidRequest, ModelNotFound
from omni.inspect import Inspector, open_log
from omni.runtime.embeddings.default import DEFAULT_EMBEDDING_ID
from omni.runtime.embeddings.engine import MLXEmbedder
from omni.service.embeddings import EmbeddingsService
from tests.api._helpers import MODEL
from tests.server import running

CAT, KITTEN, STOCKS = (
    "a cat sits on the mat",
    "a kitten rests on a rug",
    "stock markets fell sharply",
)


class OneEmbedder:
    """A stand-in for the model pool: one embedding model, an alias, and a chat model."""

    def __init__(self, embedder: MLXEmbedder) -> None:
        self.embedder_ = embedder

    @asynccontextmanager
    async def use_embedder(self, name: str | None) -> AsyncIterator[MLXEmbedder]:
        if name in (None, DEFAULT_EMBEDDING_ID, "text-embedding-3-small"):
            yield self.embedder_
            return
        if name == MODEL:
            raise InvalidRequest(
                f"Model '{name}' is a chat model, not an embedding model.", param="model"
            )
        raise ModelNotFound(f"The model '{name}' does not exist.", param="model")


@pytest.fixture(scope="module")
def served(
    tiny_engine: Any, minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, openai.OpenAI, Path]]:
    embedder = MLXEmbedder(str(minilm_dir), DEFAULT_EMBEDDING_ID)
    embedder.start()
    db = tmp_path_factory.mktemp("embeddings") / "omni.db"
    try:
        with running(tiny_engine, db) as (srv, client):
            state = srv.state
            state.embeddings = EmbeddingsService(
                state.store, state.appender, OneEmbedder(embedder), metrics=state.metrics
            )
            yield srv, client, db
    finally:
        embedder.close()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


def test_the_cat_is_nearer_the_kitten_than_the_stock_market(served) -> None:
    _, client, _ = served
    got = client.embeddings.create(
        model=DEFAULT_EMBEDDING_ID, input=[CAT, KITTEN, STOCKS], encoding_format="float"
    )
    cat, kitten, stocks = (d.embedding for d in got.data)
    assert [len(v) for v in (cat, kitten, stocks)] == [384, 384, 384]
    assert cosine(cat, kitten) > cosine(cat, stocks)
    assert got.model == DEFAULT_EMBEDDING_ID
    assert (got.usage.prompt_tokens, got.usage.total_tokens) == (22, 22)  # 8 + 8 + 6


def test_base64_and_float_agree_and_an_alias_answers(served) -> None:
    srv, client, _ = served
    # The SDK asks for base64 unless told otherwise, and decodes it itself, after its strict
    # validation (which expects lists of floats: it refuses OpenAI's own base64 answers).
    with openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="test", max_retries=0) as loose:
        packed = loose.embeddings.create(model="text-embedding-3-small", input=CAT)
    floats = client.embeddings.create(
        model="text-embedding-3-small", input=CAT, encoding_format="float"
    )
    assert packed.model == floats.model == DEFAULT_EMBEDDING_ID
    assert packed.data[0].embedding == pytest.approx(floats.data[0].embedding, abs=1e-6)
    short = client.embeddings.create(
        model=DEFAULT_EMBEDDING_ID, input=[CAT], dimensions=64, encoding_format="float"
    )
    assert len(short.data[0].embedding) == 64
    assert math.isclose(sum(x * x for x in short.data[0].embedding), 1.0, rel_tol=1e-6)


def test_without_v1_and_with_token_ids(served) -> None:
    srv, client, _ = served
    ids = [101, 1037, 4937, 102]  # [CLS] a cat [SEP]
    with httpx.Client(base_url=srv.base_url, timeout=30) as http:
        answer = http.post("/embeddings", json={"input": [ids], "encoding_format": "float"})
    assert answer.status_code == 200
    assert answer.json()["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    same = client.embeddings.create(
        model=DEFAULT_EMBEDDING_ID, input=[ids], encoding_format="float"
    )
    assert answer.json()["data"][0]["embedding"] == pytest.approx(same.data[0].embedding)


@pytest.mark.parametrize(
    ("fields", "error", "param"),
    [
        ({"input": ""}, openai.BadRequestError, "input"),
        ({"input": []}, openai.BadRequestError, "input"),
        ({"input": CAT, "encoding_format": "hex"}, openai.BadRequestError, "encoding_format"),
        ({"input": CAT, "dimensions": 385}, openai.BadRequestError, "dimensions"),
        ({"input": " ".join(["cat"] * 300)}, openai.BadRequestError, "input"),
        ({"input": [[30522]]}, openai.BadRequestError, "input"),
        ({"input": CAT, "model": MODEL}, openai.BadRequestError, "model"),
        ({"input": CAT, "model": "nope"}, openai.NotFoundError, "model"),
    ],
)
def test_refusals_in_openais_shape(served, fields, error, param) -> None:
    _, client, _ = served
    fields.setdefault("model", DEFAULT_EMBEDDING_ID)
    with pytest.raises(error) as err:
        client.embeddings.create(**{"encoding_format": "float", **fields})
    body = err.value.body
    assert isinstance(body, dict) and body["param"] == param
    assert body["type"] == "invalid_request_error"
    if "cat cat" in str(fields["input"]):
        assert "'input[0]' is 302 tokens" in body["message"]
    if fields["model"] == MODEL:
        assert "chat model" in body["message"]


def test_the_log_the_inspector_and_metrics_see_them(served) -> None:
    srv, client, db = served
    client.embeddings.create(
        model="text-embedding-3-small", input=[CAT, KITTEN], encoding_format="float"
    )
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT model, status, inputs, prompt_tokens, queued_ms >= 0, total_ms >= 0"
            " FROM embeddings ORDER BY created_ms DESC LIMIT 1"
        ).fetchall()
        kinds = conn.execute("SELECT DISTINCT kind FROM summaries").fetchall()
    assert rows == [(DEFAULT_EMBEDDING_ID, "completed", 2, 16, 1, 1)]
    assert ("embedding",) in kinds
    engine = open_log(str(db))
    try:
        with engine.connect() as conn:
            ins = Inspector(conn)
            (latest,) = ins.recent(kind="embedding", limit=1)
            assert (latest.model, latest.status, latest.input_tokens) == (
                DEFAULT_EMBEDDING_ID,
                "completed",
                16,
            )
            assert latest.preview == "2 inputs, 16 tokens"
            detail = ins.detail(latest.id)
            assert detail is not None and detail.request["model"] == "text-embedding-3-small"
            stats = ins.stats()
            assert stats.by_kind["embedding"] >= 2
    finally:
        engine.dispose()
    metrics = httpx.get(f"{srv.base_url}/metrics").text
    inputs = next(
        line for line in metrics.splitlines() if line.startswith("omni_embeddings_inputs_total")
    )
    assert float(inputs.split()[-1]) >= 2
    assert "omni_embeddings_request_seconds_count" in metrics


def test_the_projection_rebuilds_from_the_log(served, tmp_path: Path) -> None:
    _, client, db = served
    client.embeddings.create(model=DEFAULT_EMBEDDING_ID, input=CAT, encoding_format="float")
    old = tmp_path / "old.db"
    cfg = alembic_config(str(old))
    command.upgrade(cfg, "0004")
    with sqlite3.connect(old) as conn:
        conn.execute("ATTACH DATABASE ? AS live", (str(db),))
        conn.execute("INSERT INTO events SELECT * FROM live.events ORDER BY position")
    command.upgrade(cfg, "head")
    query = "SELECT * FROM summaries WHERE kind = 'embedding' ORDER BY id"
    with sqlite3.connect(db) as live, sqlite3.connect(old) as rebuilt:
        want = live.execute(query).fetchall()
        assert len(want) >= 1
        assert rebuilt.execute(query).fetchall() == want


def test_a_server_without_embedding_models_says_so(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.embeddings.create(model=DEFAULT_EMBEDDING_ID, input=CAT, encoding_format="float")
    body = err.value.body
    assert isinstance(body, dict) and body["code"] == "model_not_found"
    assert DEFAULT_EMBEDDING_ID in body["message"] and body["param"] == "model"
