"""The embeddings service on the in-memory log with a fake model: OpenAI's answer exactly,
every refusal with its param (nothing written), and the events each request leaves."""

from __future__ import annotations

import array
import base64
import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from omni.errors import InvalidRequest, ModelNotFound, OmniError
from omni.events import Append, Appender, MemoryStore, NewEvent, Notifier, StoredEvent
from omni.ports.embeddings import EmbeddingCapabilities
from omni.schemas.body import parse_body
from omni.schemas.embeddings import EmbeddingCreate
from omni.service.embeddings import MAX_INPUTS, EmbeddingsService


class FakeEmbedder:
    """A word's token is its length; a vector is made of the tokens (so each input's is its
    own), then normalized."""

    model_id = "fake-embed"
    capabilities = EmbeddingCapabilities(dimensions=4, context_length=8, vocab_size=100)
    running = 0

    def __init__(self) -> None:
        self.calls: list[list[list[int]]] = []
        self.failure: Exception | None = None

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        return [[1, *(len(w) for w in t.split()), 2] for t in texts]

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        self.calls.append(inputs)
        if self.failure is not None:
            raise self.failure
        out = []
        for tokens in inputs:
            raw = [float(sum(tokens)), float(len(tokens)), float(tokens[0]), 1.0]
            norm = math.sqrt(sum(x * x for x in raw))
            out.append([x / norm for x in raw])
        return out

    def close(self) -> None:
        pass


class FakeModels:
    def __init__(self, embedder: FakeEmbedder) -> None:
        self.fake = embedder

    @asynccontextmanager
    async def use_embedder(self, name: str | None) -> AsyncIterator[FakeEmbedder]:
        if name in (None, "fake-embed", "text-embedding-3-small"):
            yield self.fake
            return
        if name == "a-chat-model":
            raise InvalidRequest(
                "Model 'a-chat-model' is a chat model, not an embedding model.", param="model"
            )
        raise ModelNotFound(f"The model '{name}' does not exist.", param="model")


@pytest.fixture
async def setup() -> AsyncIterator[tuple[EmbeddingsService, MemoryStore, FakeEmbedder]]:
    store, fake = MemoryStore(), FakeEmbedder()
    appender = Appender(store, Notifier())
    appender.start()
    yield EmbeddingsService(store, appender, FakeModels(fake)), store, fake
    await appender.stop()


def logged(store: MemoryStore) -> list[StoredEvent]:
    """Every event in the log, in position order."""
    return list(store._events.values())


def body(**fields: Any) -> EmbeddingCreate:
    return parse_body(json.dumps(fields), EmbeddingCreate)


async def test_a_string_answers_in_openais_shape(setup) -> None:
    service, _, fake = setup
    eid, answer = await service.create(body(input="a cat sits", model="text-embedding-3-small"))
    assert eid.startswith("embd-") and len(eid) == len("embd-") + 32
    (vector,) = await fake.embed([[1, 1, 3, 4, 2]])
    assert answer == {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": vector}],
        "model": "fake-embed",  # the model that answered, not the alias asked for
        "usage": {"prompt_tokens": 5, "total_tokens": 5},
    }


@pytest.mark.parametrize(
    ("given", "inputs"),
    [
        (["one two", "three"], [[1, 3, 3, 2], [1, 5, 2]]),
        ([5, 6, 7], [[5, 6, 7]]),  # one input of token ids
        ([[5, 6], [7]], [[5, 6], [7]]),
    ],
)
async def test_every_shape_of_input(setup, given, inputs) -> None:
    service, _, fake = setup
    _, answer = await service.create(body(input=given, user="someone"))
    assert fake.calls == [inputs]
    assert [d["index"] for d in answer["data"]] == list(range(len(inputs)))
    tokens = sum(len(t) for t in inputs)
    assert answer["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


async def test_base64_is_little_endian_float32_of_the_same_vectors(setup) -> None:
    service, _, _ = setup
    _, floats = await service.create(body(input=["a b", "c"]))
    _, packed = await service.create(body(input=["a b", "c"], encoding_format="base64"))
    for f, b in zip(floats["data"], packed["data"], strict=True):
        raw = base64.b64decode(b["embedding"])
        assert len(raw) == 4 * 4
        decoded = array.array("f", raw).tolist()  # this machine is little-endian
        assert decoded == pytest.approx(f["embedding"], abs=1e-7)


async def test_dimensions_truncate_then_renormalize(setup) -> None:
    service, _, _ = setup
    _, full = await service.create(body(input="a bb ccc"))
    _, cut = await service.create(body(input="a bb ccc", dimensions=2))
    vector, short = full["data"][0]["embedding"], cut["data"][0]["embedding"]
    assert len(short) == 2
    assert math.isclose(sum(x * x for x in short), 1.0)
    norm = math.hypot(*vector[:2])
    assert short == pytest.approx([vector[0] / norm, vector[1] / norm])
    _, same = await service.create(body(input="a bb ccc", dimensions=4))
    assert same["data"][0]["embedding"] == vector


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"input": ""}, "input", "'input[0]' is an empty string"),
        ({"input": []}, "input", "non-empty"),
        ({"input": ["ok", ""]}, "input", "'input[1]' is an empty string"),
        ({"input": [[1], []]}, "input", "'input[1]' is an empty list"),
        ({"input": ["a", 1]}, "input", "all strings"),
        ({"input": [[1], ["a"]]}, "input", "'input[1]' must hold only token ids"),
        ({"input": [True]}, "input", "all strings"),
        ({"input": None}, "input", "non-empty"),
        ({"input": ["w"] * (MAX_INPUTS + 1)}, "input", "at most 2048"),
        ({"input": ["ok", "1 2 3 4 5 6 7"]}, "input", "'input[1]' is 9 tokens"),
        ({"input": [[1, 2], [3, 100]]}, "input", "'input[1]' holds token id 100"),
        ({"input": [-1]}, "input", "token id -1"),
        ({"input": "x", "dimensions": 5}, "dimensions", "between 1 and 4"),
        ({"input": "x", "model": "a-chat-model"}, "model", "is a chat model"),
    ],
)
async def test_refusals_name_their_param_and_write_nothing(setup, fields, param, says) -> None:
    service, store, fake = setup
    with pytest.raises(InvalidRequest) as err:
        await service.create(body(**fields))
    assert err.value.status == 400 and err.value.param == param
    assert says in err.value.message
    assert fake.calls == [] and logged(store) == []


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": "x", "dimensions": "2"}, "dimensions"),
        ({}, "input"),
    ],
)
def test_the_body_is_checked_at_the_edge(fields, param) -> None:
    with pytest.raises(InvalidRequest) as err:
        body(**fields)
    assert err.value.param == param


async def test_an_unknown_model_is_a_404(setup) -> None:
    service, store, _ = setup
    with pytest.raises(ModelNotFound):
        await service.create(body(input="x", model="nope"))
    assert logged(store) == []


async def test_the_log_records_the_request_not_the_vectors(setup) -> None:
    service, store, _ = setup
    eid, answer = await service.create(
        body(input=["a secret text", "b"], model="text-embedding-3-small", dimensions=3),
        owner="alice",
    )
    events = [(e.stream_id, e.seq, e.type) for e in logged(store)]
    assert events == [
        (f"{eid}/request", 0, "omni.request.accepted"),
        (eid, 0, "embedding.in_progress"),
        (eid, 1, "embedding.completed"),
    ]
    request = json.loads(logged(store)[0].data)
    assert request == {
        "kind": "embedding",
        "model": "fake-embed",
        "body": {
            "model": "text-embedding-3-small",
            "encoding_format": "float",
            "dimensions": 3,
            "user": None,
        },
        "inputs": 2,
        "prompt_tokens": 8,
        "input_tokens": [5, 3],
        "owner": "alice",
        "load_ms": 0,  # the model was loaded
        "created": request["created"],
    }
    end = json.loads(logged(store)[2].data)
    assert end["usage"] == answer["usage"] and end["model"] == "fake-embed"
    assert (end["inputs"], end["dimensions"]) == (2, 3)
    t = end["timings"]
    assert t["queued_at"] <= t["started_at"] <= t["finished_at"]
    assert all("secret" not in e.data for e in logged(store))
    assert all(str(answer["data"][0]["embedding"][0]) not in e.data for e in logged(store))


async def test_a_failed_model_is_recorded_and_raised(setup) -> None:
    service, store, fake = setup
    fake.failure = OmniError("the embedding model failed: boom")
    with pytest.raises(OmniError, match="boom"):
        await service.create(body(input="x"))
    assert [e.type for e in logged(store)][-1] == "embedding.failed"
    end = json.loads(logged(store)[-1].data)
    assert end["error"]["message"] == "the embedding model failed: boom"
    assert "finished_at" in end["timings"]


async def test_recovery_ends_what_a_crash_left_open(setup) -> None:
    service, store, _ = setup
    await service.create(body(input="done"))
    await service.appender.append(
        Append("embd-crashed", 0, [NewEvent("embedding.in_progress", "{}")])
    )
    assert await service.recover() == 1
    assert [e.type for e in await store.read("embd-crashed")][-1] == "embedding.failed"
    assert await service.recover() == 0


async def test_a_client_that_leaves_ends_it_cancelled(setup) -> None:
    import asyncio

    service, store, fake = setup
    entered = asyncio.Event()

    async def never(inputs: list[list[int]]) -> list[list[float]]:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    fake.embed = never  # type: ignore[method-assign]
    task = asyncio.create_task(service.create(body(input="x")))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await service.appender.append()  # what was queued before it has committed
    end = logged(store)[-1]
    assert end.type == "embedding.failed"
    assert json.loads(end.data)["error"]["code"] == "cancelled"
