"""The Responses API over a WebSocket (`GET /v1/responses` with `Upgrade: websocket`), as
OpenAI's WebSocket mode has it: each turn is a `response.create` message (a create's body and
`"type": "response.create"`; `stream` is implied), answered by the events its SSE stream would
carry, one JSON text message each, in order, up to its terminal event. The events are read
from the log as the SSE path reads them: the generation writes the log and the socket only
follows it, so a slow reader never slows a generation.

The messages a client may send:
- `response.create`: a turn. Turns run one at a time; what arrives meanwhile waits its turn.
  With `"generate": false` (Codex's warm-up when it connects), a response that is complete at
  once with no output: nothing runs, nothing is recorded. As OpenAI does, the connection keeps
  its last response that the log does not (a warm-up, or `store: false`) in memory, so a next
  turn may chain to it by `previous_response_id` and send only its new items.
- `response.resume` `{"response_id", "starting_after"}`: a stored response's events after
  sequence number `starting_after` (-1: all), live to its end: a client back after a drop.
- `response.processed` `{"response_id"}`: Codex's word that it has handled a turn; nothing
  to do.
Anything else, or a message that is not valid, is answered by an `error` message naming the
problem, and the socket stays open. A client gone mid-turn cancels a foreground response at its
next token, as an SSE client does; a background one runs on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import aclosing
from typing import Any

from quart import websocket

from omni.api import access
from omni.api.current import current_server
from omni.api.gate import owner
from omni.errors import SERVER_ERROR, InvalidRequest, OmniError, StoreError
from omni.lifecycle import Lifecycle
from omni.schemas.body import load_json, validate
from omni.schemas.items import normalize_input
from omni.schemas.responses import ResponseCreate
from omni.service.responses import ResponsesService
from omni.service.streams import is_terminal

log = logging.getLogger(__name__)

CREATE = "response.create"
RESUME = "response.resume"
PROCESSED = "response.processed"
MESSAGE_TYPES = (CREATE, RESUME, PROCESSED)
GOING_AWAY = 1001  # the WebSocket close code of a server that stops


async def serve() -> None:
    """One connection: accepted (the keys, Host and Origin were checked at the upgrade,
    omni.api.socket_gate), then its messages one at a time until the client goes, or until
    the server stops (closed with 1001, "going away", once the stop's endings are sent)."""
    server = current_server()
    await websocket.accept()
    session = Session(server.responses, server.lifecycle, owner())
    while (message := await next_message(server.lifecycle)) is not None:
        await session.handle(message)
    await websocket.close(GOING_AWAY, "The server is shutting down.")


async def next_message(lifecycle: Lifecycle) -> str | bytes | None:
    """The client's next message; None once the server has stopped serving."""
    receiving = asyncio.ensure_future(websocket.receive())
    stopped = asyncio.ensure_future(lifecycle.stopped_serving.wait())
    try:
        await asyncio.wait((receiving, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (receiving, stopped):
            waiting.cancel()  # a message not yet taken stays queued
    return receiving.result() if receiving.done() and not receiving.cancelled() else None


def error_message(exc: OmniError, seq: int | None = None) -> str:
    """OpenAI's `error` event (`code`, `message`, `param`, and `sequence_number` within a
    turn), with the HTTP `status` and the `error` body the request would have had over HTTP:
    what OpenAI's WebSocket mode sends, and what Codex reads an error by."""
    error: Any = exc.body()["error"]
    data: dict[str, Any] = {
        "type": "error",
        "code": error["code"],
        "message": error["message"],
        "param": error["param"],
    }
    if seq is not None:
        data["sequence_number"] = seq
    data["status"] = exc.status
    data["error"] = error
    return json.dumps(data, separators=(",", ":"))


def access_line(path: str, started: float, fields: dict[str, Any]) -> None:
    """`WS /v1/responses 200 41.2ms id=resp_… input_tokens=9 output_tokens=16`: a message's
    line in the access log (omni.api.access), as an HTTP request's (status 499: the client
    went before its answer ended)."""
    ms = round((time.perf_counter() - started) * 1000, 1)
    line = {"method": "WS", "path": path, "status": fields.pop("status"), "ms": ms}
    line.update((k, v) for k, v in fields.items() if v is not None)
    access.log.info(access.format_line(line), extra={"access": line})


class Session:
    """A connection's turns, for the owner of the key it was opened with."""

    def __init__(self, service: ResponsesService, lifecycle: Lifecycle, owner: str | None):
        self.service = service
        self.lifecycle = lifecycle
        self.owner = owner
        # The last response of this connection that the log does not keep: its id, and every
        # item of its context and output, for a next turn chained to it.
        self.unstored: tuple[str, list[dict[str, Any]]] | None = None
        self.line: dict[str, Any] = {}  # the fields of the current message's access line

    async def handle(self, raw: str | bytes) -> None:
        """One message, and its access line (as an HTTP request has one)."""
        started = time.perf_counter()
        self.line = {"status": access.GONE}  # until it is answered: the client may go first
        try:
            await self.answer(raw)
        finally:
            if self.line:  # empty: a message that asks nothing (response.processed)
                access_line(websocket.path, started, {**self.line, "key": self.owner})

    async def answer(self, raw: str | bytes) -> None:
        """Its failure is an `error` message, and the connection goes on."""
        try:
            message = load_json(raw)
            if not isinstance(message, dict):
                raise InvalidRequest("A message must be a JSON object with a `type`.")
            kind = message.get("type")
            if kind == CREATE:
                await self.create(message)
            elif kind == RESUME:
                await self.resume(message)
            elif kind == PROCESSED:
                self.line = {}
                return
            else:
                raise InvalidRequest(
                    f"Unknown message type {kind!r}: expected one of {', '.join(MESSAGE_TYPES)}.",
                    param="type",
                )
            if self.line["status"] == access.GONE:  # not failed on the way (the log unread)
                self.line["status"] = 200
        except OmniError as exc:
            self.line["status"] = exc.status
            await self.fail(exc)
        except Exception:  # a bug: said as a 500 is, and the connection goes on
            log.exception("unhandled error on a Responses WebSocket")
            self.line["status"] = 500
            await self.fail(OmniError(SERVER_ERROR))

    async def create(self, message: dict[str, Any]) -> None:
        generate = message.get("generate", True)
        if not isinstance(generate, bool):
            raise InvalidRequest("`generate` must be a boolean.", param="generate")
        body = validate(message, ResponseCreate)  # its `type` is a key the body ignores
        body = self.chained(body).model_copy(update={"stream": True})
        if not generate:
            await self.warm_up(body)
            return
        with self.lifecycle.intake.request():
            self.lifecycle.refuse_if_closing()
            created = await self.service.create(body, self.owner)
        final = await self.follow(created["id"], -1, cancel_on_close=not body.background)
        self.remember(body, final, body.store)

    def chained(self, body: ResponseCreate) -> ResponseCreate:
        """The body, with the response it chains to written out ahead of its input where
        that is this connection's last, unstored one (which the log cannot give)."""
        if self.unstored is None or body.previous_response_id != self.unstored[0]:
            return body
        items = [*self.unstored[1], *normalize_input(body.input)]
        return body.model_copy(update={"input": items, "previous_response_id": None})

    def remember(self, body: ResponseCreate, final: dict[str, Any] | None, stored: bool) -> None:
        self.unstored = None
        if final is not None and not stored:
            self.unstored = (final["id"], [*normalize_input(body.input), *final["output"]])

    async def warm_up(self, body: ResponseCreate) -> None:
        """`generate: false`: the events of a response complete with no output."""
        final = await self.service.warm_up(body, self.owner)
        self.line.update(id=final["id"], warm_up=True)
        opened = {**final, "status": "in_progress", "completed_at": None, "usage": None}
        steps = (("response.created", opened), ("response.in_progress", opened))
        for seq, (type_, response) in enumerate((*steps, ("response.completed", final))):
            event = {"type": type_, "sequence_number": seq, "response": response}
            await websocket.send(json.dumps(event, separators=(",", ":")))
        self.remember(body, final, stored=False)

    async def resume(self, message: dict[str, Any]) -> None:
        response_id = message.get("response_id")
        if not isinstance(response_id, str):
            raise InvalidRequest(
                "`response_id` is required: the id of the response to resume.",
                param="response_id",
            )
        after = message.get("starting_after", -1)
        if not isinstance(after, int) or isinstance(after, bool) or after < -1:
            raise InvalidRequest(
                "`starting_after` must be an integer of at least -1: the sequence number of "
                "the last event received.",
                param="starting_after",
            )
        await self.service.retrieve(response_id, self.owner)  # a 404 before any event
        await self.follow(response_id, after, cancel_on_close=False)

    async def follow(
        self, response_id: str, after: int, cancel_on_close: bool
    ) -> dict[str, Any] | None:
        """Send the response's events after `after`, as the log has them, to its end.
        Returns the response its terminal event carries (None: it did not end here)."""
        finished = False
        last = None
        self.line["id"] = response_id
        try:
            async with aclosing(self.service.pages(response_id, after)) as pages:
                async for rows in pages:
                    for event in rows or ():  # None: a keep-alive, which a socket needs not
                        await websocket.send(event.data)
                        last = event
            finished = True
        except StoreError as exc:  # the log cannot be read: say so, and end the turn
            self.line["status"] = exc.status
            await self.fail(exc, (last.seq if last is not None else after) + 1)
        finally:
            # A foreground turn whose client went away (Quart cancels this task when the
            # socket closes) is cancelled at the next token.
            if not finished and cancel_on_close:
                self.service.cancel_running(response_id)
            self.service.release(response_id)
        if last is None or not is_terminal(last):
            return None
        final = dict(json.loads(last.data)["response"])
        self.line.update(access.usage_note(final.get("usage")))
        return final

    async def fail(self, exc: OmniError, seq: int | None = None) -> None:
        if not exc.public:  # the client reads SERVER_ERROR; the operator, what happened
            log.error("%s: %s", type(exc).__name__, exc.message)
        await websocket.send(error_message(exc, seq))
