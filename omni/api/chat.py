"""Chat Completions and legacy Completions: create (plain or streamed), from the log."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

from quart import Blueprint, Response, request

from omni.api import access
from omni.api.answer import read_to_end
from omni.api.body import body_bytes
from omni.api.current import current_server
from omni.api.gate import owner
from omni.api.query import page_args
from omni.api.sse import DONE_FRAME, KEEPALIVE_FRAME, chunk_frames
from omni.errors import StoreError
from omni.schemas.body import load_json, parse_body
from omni.schemas.chat import ChatCompletionCreate, CompletionCreate
from omni.service.completions import CompletionsService
from omni.service.flights import is_end
from omni.vocabulary import COMPLETION_ERROR

bp = Blueprint("chat", __name__)


Body = TypeVar("Body", ChatCompletionCreate, CompletionCreate)
Created = TypeVar("Created")


async def _accept(
    schema: type[Body], create: Callable[[Body], Awaitable[Created]]
) -> tuple[Body, Created]:
    """A completion request taken in (omni.service.intake): its body, for a model served
    here, and what `create` made of it."""
    server = current_server()
    with server.lifecycle.intake.request():
        body: Body = parse_body(await body_bytes(), schema)
        server.responses.check_model(body.model)
        return body, await create(body)


def _stream(service: CompletionsService, cid: str, include_usage: bool) -> Response:
    line = access.note(id=cid)

    async def body() -> AsyncIterator[bytes]:
        finished = False
        try:
            # The events a read brought leave together: one write, not one for each; the
            # last read's with [DONE].
            async with aclosing(service.pages(cid)) as pages:
                async for rows in pages:
                    if rows is None:
                        yield KEEPALIVE_FRAME
                        continue
                    chunk = chunk_frames(((e.type, e.data) for e in rows), include_usage)
                    if is_end(rows[-1]):  # generation is over: nothing left to stop
                        chunk, finished = chunk + DONE_FRAME, True
                        line.update(access.terminal_note(rows[-1].data))
                    if chunk:
                        yield chunk
        except StoreError as exc:  # the log cannot be read (its file is gone): say so, end
            yield b"data: " + json.dumps(exc.body()).encode() + b"\n\n" + DONE_FRAME
        else:
            if not finished:  # defensive: the pages ended without a terminal event
                finished = True
                yield DONE_FRAME
        finally:
            if not finished:  # the client went away: stop generating for it
                service.cancel_running(cid)
            service.release(cid)  # an unstored completion may go now

    response = Response(body(), content_type="text/event-stream")
    response.headers["cache-control"] = "no-cache"
    response.timeout = None
    return response


async def _complete(service: CompletionsService, kind: str, cid: str) -> dict[str, Any]:
    events = await read_to_end(service, cid, COMPLETION_ERROR)
    folded = service.fold(kind, events)
    access.note(id=cid, **access.usage_note(folded.get("usage")))
    return folded


def _no_cache() -> bool:
    return "no-cache" in request.headers.get("cache-control", "").lower()


@bp.post("/chat/completions")
async def create_chat() -> Any:
    service = current_server().completions
    body, (cid, hit) = await _accept(
        ChatCompletionCreate,
        lambda body: service.create_chat(body, bypass_cache=_no_cache(), owner=owner()),
    )
    if body.stream:
        response = _stream(service, cid, body.include_usage)
    else:
        response = Response(
            json.dumps(await _complete(service, "chat", cid)), content_type="application/json"
        )
    response.headers["x-omni-cache"] = "hit" if hit else "miss"
    access.note(id=cid, cache=response.headers["x-omni-cache"])
    return response


@bp.post("/completions")
async def create_text() -> Any:
    service = current_server().completions
    body, cid = await _accept(CompletionCreate, lambda body: service.create_text(body, owner()))
    if body.stream:
        return _stream(service, cid, body.include_usage)
    return await _complete(service, "text", cid)


# --- stored chat completions -------------------------------------------------------


@bp.get("/chat/completions")
async def list_chat() -> Any:
    after, limit, order = page_args("asc")
    metadata = {
        key[len("metadata[") : -1]: value
        for key, value in request.args.items()
        if key.startswith("metadata[") and key.endswith("]")
    }
    return await current_server().stored.list(
        request.args.get("model"), metadata, after, limit, order, owner()
    )


@bp.get("/chat/completions/<cid>")
async def retrieve_chat(cid: str) -> Any:
    return await current_server().stored.retrieve(cid, owner())


@bp.get("/chat/completions/<cid>/messages")
async def chat_messages(cid: str) -> Any:
    after, limit, order = page_args("asc")
    return await current_server().stored.messages(cid, after, limit, order, owner())


@bp.post("/chat/completions/<cid>")
async def update_chat(cid: str) -> Any:
    return await current_server().stored.update(cid, load_json(await body_bytes()), owner())


@bp.delete("/chat/completions/<cid>")
async def delete_chat(cid: str) -> Any:
    return await current_server().stored.delete(cid, owner())
