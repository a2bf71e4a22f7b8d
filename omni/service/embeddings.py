"""Embeddings over the event log. Each request is a stream `embd-X`: `embedding.in_progress`
when accepted (with its request on `embd-X/request`: model, input count, tokens, owner, never
the inputs' text), then `embedding.completed` (usage, timings) or `embedding.failed`. The
vectors are the answer, not the record: they are never written."""

from __future__ import annotations

import array
import asyncio
import base64
import math
import sys
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from omni.errors import InvalidRequest, internal
from omni.events import Append, NewEvent
from omni.ids import new_id
from omni.ports.embeddings import Embedder
from omni.schemas.embeddings import EmbeddingCreate
from omni.service.modality import LeftOpen, ModelRequests, error_body, now_ms, submit_end
from omni.service.models import LOAD_MS
from omni.service.streams import dumps, request_stream
from omni.vocabulary import (
    ACCEPTED,
    EMBEDDING,
    EMBEDDING_COMPLETED,
    EMBEDDING_ENDS,
    EMBEDDING_FAILED,
    EMBEDDING_IN_PROGRESS,
    ID_PREFIXES,
)

MAX_INPUTS = 2048  # OpenAI's limit of inputs in one request
RESTARTED = "The server restarted before these embeddings were ready."
GONE = "The client went away before its embeddings were ready."
CANCELLED = error_body(GONE, "cancelled")  # an ending's error: the client went away


class EmbedderSource(Protocol):
    """What the service asks of the model pool (omni.service.models.Models)."""

    def use_embedder(self, name: str | None) -> AbstractAsyncContextManager[Embedder]:
        """The embedding model `name` names (an alias, or None: the default), loaded and kept
        loaded while the request is taken in and embedded; a ModelNotFound, or an
        InvalidRequest for a chat model."""
        ...


def split_input(value: Any) -> tuple[list[str] | None, list[list[int]] | None]:
    """`input` as texts or as token-id lists (one of the two is None); an empty or mixed
    input is a 400 naming it."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise InvalidRequest(
            "'input' must be a non-empty string, list of strings, list of token ids or "
            "list of lists of token ids.",
            param="input",
        )
    if len(value) > MAX_INPUTS:
        raise InvalidRequest(
            f"'input' holds {len(value)} inputs; at most {MAX_INPUTS} may be embedded at once.",
            param="input",
        )
    if all(isinstance(v, str) for v in value):
        return _texts(value), None
    if all(_is_id(v) for v in value):
        return None, [value]
    if all(isinstance(v, list) for v in value):
        return None, _token_lists(value)
    raise InvalidRequest(
        "'input' must be all strings, all token ids, or all lists of token ids.", param="input"
    )


def _texts(value: list[str]) -> list[str]:
    for i, text in enumerate(value):
        if not text:
            raise InvalidRequest(f"'input[{i}]' is an empty string.", param="input")
    return value


def _token_lists(value: list[list[Any]]) -> list[list[int]]:
    for i, ids in enumerate(value):
        if not ids:
            raise InvalidRequest(f"'input[{i}]' is an empty list of tokens.", param="input")
        if not all(_is_id(t) for t in ids):
            raise InvalidRequest(f"'input[{i}]' must hold only token ids.", param="input")
    return value


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def shaped(vector: list[float], dimensions: int | None) -> list[float]:
    """The vector cut to `dimensions` (a Matryoshka-style shortening) and made a unit vector
    again; as is without."""
    if dimensions is None or dimensions >= len(vector):
        return vector
    cut = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in cut)) or 1.0
    return [x / norm for x in cut]


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    """A float list, or OpenAI's base64: the little-endian float32 bytes."""
    if encoding_format == "float":
        return vector
    packed = array.array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


class EmbeddingsService(ModelRequests[EmbedderSource]):
    kinds = (EMBEDDING,)
    left_open = LeftOpen.failing(
        EMBEDDING_IN_PROGRESS, EMBEDDING_ENDS, EMBEDDING_FAILED, RESTARTED, "embeddings requests"
    )

    async def create(
        self, body: EmbeddingCreate, owner: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """`owner`'s embeddings: their id in the log and OpenAI's answer."""
        queued_at = now_ms()
        texts, given = split_input(body.input)
        async with self.models.use_embedder(body.model) as embedder:
            return await self._create(body, embedder, texts, given, owner, queued_at)

    async def _create(
        self,
        body: EmbeddingCreate,
        embedder: Embedder,
        texts: list[str] | None,
        given: list[list[int]] | None,
        owner: str | None,
        queued_at: int,
    ) -> tuple[str, dict[str, Any]]:
        caps = embedder.capabilities
        if body.dimensions is not None and body.dimensions > caps.dimensions:
            raise InvalidRequest(
                f"'dimensions' must be between 1 and {caps.dimensions} for model "
                f"'{embedder.model_id}'.",
                param="dimensions",
            )
        if texts is not None:
            inputs = await asyncio.to_thread(embedder.tokenize, texts)
        else:
            assert given is not None
            inputs = given
            _check_vocabulary(inputs, caps.vocab_size)
        for i, tokens in enumerate(inputs):
            if len(tokens) > caps.context_length:
                raise InvalidRequest(
                    f"'input[{i}]' is {len(tokens)} tokens; model '{embedder.model_id}' "
                    f"embeds at most {caps.context_length} tokens an input.",
                    param="input",
                    code="context_length_exceeded",
                )
        eid = new_id("embd").replace("embd_", ID_PREFIXES[EMBEDDING])
        counts = [len(t) for t in inputs]
        await self.leasing.claim(eid)
        try:
            return await self._run(eid, body, embedder, inputs, counts, owner, queued_at)
        finally:
            await self.leasing.release([eid])

    async def _run(
        self,
        eid: str,
        body: EmbeddingCreate,
        embedder: Embedder,
        inputs: list[list[int]],
        counts: list[int],
        owner: str | None,
        queued_at: int,
    ) -> tuple[str, dict[str, Any]]:
        caps, model_id = embedder.capabilities, embedder.model_id
        await self._accept(eid, body, model_id, counts, owner, queued_at)
        timings: dict[str, int] = {"queued_at": queued_at, "started_at": now_ms()}
        try:
            vectors = await embedder.embed(inputs)
        except asyncio.CancelledError:  # the client went away: the log says so, unawaited
            submit_end(self.appender, eid, 1, EMBEDDING_FAILED, model_id, timings, CANCELLED)
            raise
        except Exception as exc:
            failure = internal(exc, f"embeddings {eid}")
            failed = failure.body()
            await submit_end(self.appender, eid, 1, EMBEDDING_FAILED, model_id, timings, failed)
            raise failure from None
        usage = {"prompt_tokens": sum(counts), "total_tokens": sum(counts)}
        dims = body.dimensions or caps.dimensions
        done = {"inputs": len(inputs), "dimensions": min(dims, caps.dimensions), "usage": usage}
        await submit_end(self.appender, eid, 1, EMBEDDING_COMPLETED, model_id, timings, done)
        self._observe(len(inputs), usage["prompt_tokens"], timings)
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": encoded(shaped(v, body.dimensions), body.encoding_format),
            }
            for i, v in enumerate(vectors)
        ]
        return eid, {"object": "list", "data": data, "model": embedder.model_id, "usage": usage}

    async def _accept(
        self,
        eid: str,
        body: EmbeddingCreate,
        model_id: str,
        counts: list[int],
        owner: str | None,
        queued_at: int,
    ) -> None:
        request = {
            "kind": EMBEDDING,
            "model": model_id,
            "body": body.model_dump(mode="json", exclude={"input"}),
            "inputs": len(counts),
            "prompt_tokens": sum(counts),
            "input_tokens": counts,
            "owner": owner,
            "load_ms": LOAD_MS.get(),  # its model's load, if it waited for one
            "created": queued_at // 1000,
        }
        opening = {"id": eid, "model": model_id, "inputs": len(counts)}
        await self.appender.append(
            Append(request_stream(eid), 0, [NewEvent(ACCEPTED, dumps(request))]),
            Append(eid, 0, [NewEvent(EMBEDDING_IN_PROGRESS, dumps(opening))]),
        )

    def _observe(self, inputs: int, tokens: int, timings: dict[str, int]) -> None:
        m = self.metrics
        m.embedding_inputs.inc(inputs)
        m.input_tokens.labels("embeddings").inc(tokens)
        m.embedding_seconds.observe((now_ms() - timings["queued_at"]) / 1000)


def _check_vocabulary(inputs: list[list[int]], vocab_size: int) -> None:
    for i, tokens in enumerate(inputs):
        for token in tokens:
            if token < 0 or (vocab_size and token >= vocab_size):
                known = f" (0 to {vocab_size - 1})" if vocab_size else ""
                raise InvalidRequest(
                    f"'input[{i}]' holds token id {token}, outside the model's vocabulary{known}.",
                    param="input",
                )
