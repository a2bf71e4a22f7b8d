"""Anthropic's Messages API: create (plain or streamed), count_tokens, and, because the log
keeps every message, retrieve (JSON, or its stream replayed and followed as SSE). Errors on
these paths are Anthropic's shape (omni.api.errors)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from quart import Blueprint, Response, request

from omni.api import access
from omni.api.answer import read_to_end
from omni.api.body import body_bytes
from omni.api.current import current_server
from omni.api.errors import anthropic_body
from omni.api.gate import owner
from omni.api.query import bool_arg, int_arg, resumed_after
from omni.api.sse import frame
from omni.errors import StoreError
from omni.schemas.body import parse_body
from omni.schemas.messages import MessageCreate, MessagesRequest
from omni.service.messages import MessagesService
from omni.vocabulary import MESSAGE_CANCELLED, MESSAGE_ENDS, MESSAGE_ERROR, MESSAGE_STOP

bp = Blueprint("messages", __name__)

# Anthropic's keep-alive: an event of its own, which the SDKs read and skip.
PING_FRAME = b'event: ping\ndata: {"type": "ping"}\n\n'


def _frames(rows: list[Any]) -> bytes:
    """Stored events as Anthropic's SSE frames (`id:` too: a client may resume by it)."""
    return b"".join(frame(e.type, e.data, e.seq) for e in rows if e.type != MESSAGE_CANCELLED)


def _stream(service: MessagesService, mid: str, after: int, cancel_on_close: bool) -> Response:
    line = access.note(id=mid)

    async def body() -> AsyncIterator[bytes]:
        finished = False
        try:
            async with aclosing(service.pages(mid, after)) as pages:
                async for rows in pages:
                    if rows is None:
                        yield PING_FRAME
                        continue
                    if rows[-1].type in MESSAGE_ENDS:
                        finished = True
                        line.update(_usage_note(rows[-1].type, rows))
                    yield _frames(rows)
            finished = True
        except StoreError as exc:  # the log cannot be read (its file is gone): say so, end
            yield f"event: error\ndata: {json.dumps(anthropic_body(exc))}\n\n".encode()
        finally:
            if not finished and cancel_on_close:  # the client went away: stop for it
                service.cancel_running(mid)
            service.release(mid)  # an unstored message may go now

    response = Response(body(), content_type="text/event-stream")
    response.headers["cache-control"] = "no-cache"
    response.headers["x-accel-buffering"] = "no"
    response.timeout = None
    return response


def _usage_note(last: str, rows: list[Any]) -> dict[str, Any]:
    """The tokens of a message that ended well: its `message_delta`, just before the stop."""
    if last != MESSAGE_STOP or len(rows) < 2:
        return {}
    return access.terminal_note(rows[-2].data)


async def _complete(service: MessagesService, mid: str) -> dict[str, Any]:
    message = service.fold(await read_to_end(service, mid, MESSAGE_ERROR))
    access.note(id=mid, **access.usage_note(message.get("usage")))
    return message


@bp.post("/messages")
async def create() -> Any:
    server = current_server()
    service = server.messages
    with server.lifecycle.intake.request():
        body = parse_body(await body_bytes(), MessageCreate)
        server.responses.check_model(body.model)
        no_cache = "no-cache" in request.headers.get("cache-control", "").lower()
        mid, hit = await service.create(body, owner(), bypass_cache=no_cache)
    if body.stream:
        response = _stream(service, mid, -1, cancel_on_close=True)
    else:
        response = Response(
            json.dumps(await _complete(service, mid)), content_type="application/json"
        )
    response.headers["x-omni-cache"] = "hit" if hit else "miss"
    access.note(id=mid, cache=response.headers["x-omni-cache"])
    return response


@bp.post("/messages/count_tokens")
async def count_tokens() -> Any:
    server = current_server()
    body = parse_body(await body_bytes(), MessagesRequest)
    server.responses.check_model(body.model)
    return {"input_tokens": await server.messages.count_tokens(body, owner())}


@bp.get("/messages/<mid>")
async def retrieve(mid: str) -> Any:
    service = current_server().messages
    if not bool_arg("stream"):
        return await service.retrieve(mid, owner())
    after = int_arg("starting_after", -1, low=-1)
    await service.check(mid, owner())  # 404 before any SSE bytes
    return _stream(service, mid, resumed_after(after), cancel_on_close=False)
