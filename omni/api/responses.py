"""The Responses API: create (over HTTP, or turns over a WebSocket: omni.api.responses_socket),
retrieve (JSON or SSE replay), input_items, input_tokens, compact, cancel, delete."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from quart import Blueprint, Response

from omni.api import access, responses_socket
from omni.api.body import body_bytes
from omni.api.current import current_server
from omni.api.gate import owner
from omni.api.query import bool_arg, int_arg, page_args, resumed_after
from omni.api.sse import KEEPALIVE_FRAME, error_frame, frame
from omni.errors import OmniError, StoreError
from omni.schemas.body import parse_body
from omni.schemas.responses import ResponseCreate
from omni.service.responses import ResponsesService

log = logging.getLogger(__name__)
bp = Blueprint("responses", __name__)


def _service() -> ResponsesService:
    return current_server().responses


def _sse(
    service: ResponsesService, response_id: str, after: int, cancel_on_close: bool
) -> Response:
    line = access.note(id=response_id)

    async def body() -> AsyncIterator[bytes]:
        finished = False
        last = None
        try:
            # The events a read brought leave together: one write, not one for each.
            async with aclosing(service.pages(response_id, after)) as pages:
                async for rows in pages:
                    if rows is None:
                        yield KEEPALIVE_FRAME
                        continue
                    last = rows[-1]
                    yield b"".join(frame(e.type, e.data, e.seq) for e in rows)
            finished = True
        except StoreError as exc:  # the log cannot be read (its file is gone): say so, end
            seq = (last.seq if last is not None else after) + 1
            yield error_frame(exc, seq)
        finally:
            if finished and last is not None:
                line.update(access.terminal_note(last.data))
            # A foreground stream whose client went away is cancelled at the next token.
            if not finished and cancel_on_close:
                service.cancel_running(response_id)
            service.release(response_id)

    response = Response(body(), content_type="text/event-stream")
    response.headers["cache-control"] = "no-cache"
    response.headers["x-accel-buffering"] = "no"
    response.timeout = None
    return response


@bp.post("/responses")
async def create() -> Any:
    server = current_server()
    service = server.responses
    with server.lifecycle.intake.request():
        body = parse_body(await body_bytes(), ResponseCreate)
        created = await service.create(body, owner())
    response_id = created["id"]
    access.note(id=response_id)
    if body.stream:
        return _sse(service, response_id, -1, cancel_on_close=not body.background)
    if body.background:
        return created  # queued: it runs, and is recorded, without us
    try:
        final = await service.wait(response_id)
    finally:
        service.cancel_running(response_id)  # no-op once finished; stops it if we were cut off
        service.release(response_id)
    access.note(**access.usage_note(final.get("usage")))
    if final["status"] == "failed" and not final["output"]:
        raise OmniError(final["error"]["message"])
    return final


@bp.websocket("/responses")
async def create_over_socket() -> None:
    """`GET /v1/responses` with `Upgrade: websocket`: turns as `response.create` messages."""
    await responses_socket.serve()


@bp.post("/responses/input_tokens")
async def input_tokens() -> Any:
    """The input tokens a create with this body would prefill (the SDK's
    `responses.input_tokens.count`): nothing generated, nothing recorded."""
    body = parse_body(await body_bytes(), ResponseCreate)
    count = await _service().count_input_tokens(body, owner())
    return {"object": "response.input_tokens", "input_tokens": count}


@bp.post("/responses/compact")
async def compact() -> Any:
    """The compacted window of a conversation (the SDK's `responses.compact`): a compaction
    item whose summary the model writes, recorded as a response of its own."""
    server = current_server()
    with server.lifecycle.intake.request():
        body = parse_body(await body_bytes(), ResponseCreate)
        return await server.responses.compactor.compact(body, owner())


@bp.get("/responses/<response_id>")
async def retrieve(response_id: str) -> Any:
    service = _service()
    stream = bool_arg("stream")
    after = int_arg("starting_after", -1, low=-1)
    if not stream:
        return await service.retrieve(response_id, owner())
    await service.retrieve(response_id, owner())  # 404 before any SSE bytes
    return _sse(service, response_id, resumed_after(after), cancel_on_close=False)


@bp.get("/responses/<response_id>/input_items")
async def input_items(response_id: str) -> Any:
    after, limit, order = page_args("desc")
    return await _service().input_items(response_id, after, limit, order, owner())


@bp.post("/responses/<response_id>/cancel")
async def cancel(response_id: str) -> Any:
    return await _service().cancel(response_id, owner())


@bp.delete("/responses/<response_id>")
async def delete(response_id: str) -> Any:
    return await _service().delete(response_id, owner())
