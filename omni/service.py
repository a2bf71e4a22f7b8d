"""Commands and queries of the Responses API over the event log.

Writes go through the appender (group commit); reads go through the store and `follow`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from omni.engine.recorder import ResponseRecorder
from omni.engine.types import Engine, Failed, Finished, Job, Sampling
from omni.errors import InvalidRequest, ModelNotFound, NotFound, SeqConflict
from omni.events import Append, Appender, EventStore, NewEvent, Notifier, StoredEvent, follow
from omni.ids import new_id
from omni.projections.input_items import page_items
from omni.projections.messages import to_chat_messages
from omni.projections.response import fold_response
from omni.schemas.items import normalize_input
from omni.schemas.responses import ResponseCreate
from omni.schemas.stream import TERMINAL_TYPES

log = logging.getLogger(__name__)

ACCEPTED = "omni.request.accepted"
DELETED = "omni.response.deleted"


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def request_stream(response_id: str) -> str:
    return f"{response_id}/request"


def is_terminal(event: StoredEvent) -> bool:
    return event.type in TERMINAL_TYPES


class ResponsesService:
    def __init__(
        self,
        store: EventStore,
        appender: Appender,
        notifier: Notifier,
        engine: Engine,
        model_aliases: frozenset[str] = frozenset(),
        keepalive: float = 15.0,
    ):
        self.store = store
        self.appender = appender
        self.notifier = notifier
        self.engine = engine
        self.model_aliases = model_aliases | {engine.model_id}
        self.keepalive = keepalive
        self._running: dict[str, Job] = {}
        # store:false responses whose creating client has not finished reading yet.
        self._unreleased: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --- commands -------------------------------------------------------------

    def check_model(self, model: str | None) -> None:
        if model is not None and model not in self.model_aliases:
            raise ModelNotFound(
                f"The model '{model}' does not exist or is not served here "
                f"(this server serves '{self.engine.model_id}').",
                param="model",
            )

    async def create(self, body: ResponseCreate) -> str:
        """Accept a request: one transaction writes the request and the opening events."""
        self.check_model(body.model)
        if body.conversation is not None:
            raise InvalidRequest("The conversations API is not supported.", param="conversation")
        if body.background:
            raise InvalidRequest("Background responses are not supported yet.", param="background")
        history = await self._history(body.previous_response_id)
        items = normalize_input(body.input)
        if not items and not history:
            raise InvalidRequest("`input` is required.", param="input")
        tools = [t for t in body.tools if t.get("type") == "function"]
        for tool in body.tools:
            if tool.get("type") != "function":
                log.warning("ignoring tool of type %r: it cannot run here", tool.get("type"))
        prompt = self._render(body.instructions, history + items, tools)
        max_tokens = body.max_output_tokens or max(1, self.engine.context_length - len(prompt))

        response_id = new_id("resp")
        response = self._initial_response(response_id, body, tools)
        recorder = ResponseRecorder(response, next_seq=0)
        request = {
            "body": body.model_dump(mode="json", exclude={"input"}),
            "input": items,
            "response": response,
            "prompt_tokens": len(prompt),
        }
        opening = [NewEvent(e["type"], dumps(e)) for e in recorder.opening()]
        await self.appender.append(
            Append(request_stream(response_id), 0, [NewEvent(ACCEPTED, dumps(request))]),
            Append(response_id, 0, opening),
        )

        job = Job(
            prompt,
            Sampling(
                temperature=1.0 if body.temperature is None else body.temperature,
                top_p=1.0 if body.top_p is None else body.top_p,
                max_tokens=max_tokens,
            ),
        )
        self._running[response_id] = job
        if not body.store:
            self._unreleased[response_id] = asyncio.Event()
        task = asyncio.create_task(self._record(response_id, recorder, job, body.store))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.engine.submit(job)
        return response_id

    def _render(
        self, instructions: str | None, items: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> list[int]:
        structured = bool(getattr(self.engine, "supports_tools", False))
        messages = to_chat_messages(instructions, items, structured)
        chat_tools = [
            {
                "type": "function",
                "function": {
                    k: t[k] for k in ("name", "description", "parameters") if t.get(k) is not None
                },
            }
            for t in tools
        ]
        prompt = self.engine.render(messages, chat_tools)
        limit = self.engine.context_length
        if len(prompt) >= limit:
            raise InvalidRequest(
                f"The input is {len(prompt)} tokens; this model's context is {limit} tokens.",
                param="input",
                code="context_length_exceeded",
            )
        return prompt

    def _initial_response(
        self, response_id: str, body: ResponseCreate, tools: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "background": body.background,
            "completed_at": None,
            "error": None,
            "incomplete_details": None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "max_tool_calls": body.max_tool_calls,
            "metadata": body.metadata or {},
            "model": body.model or self.engine.model_id,
            "output": [],
            "parallel_tool_calls": body.parallel_tool_calls,
            "previous_response_id": body.previous_response_id,
            "prompt_cache_key": body.prompt_cache_key,
            "reasoning": body.reasoning or {"effort": None, "summary": None},
            "safety_identifier": body.safety_identifier,
            "service_tier": "default",
            "store": body.store,
            "temperature": 1.0 if body.temperature is None else body.temperature,
            "text": body.text or {"format": {"type": "text"}},
            "tool_choice": body.tool_choice,
            "tools": tools,
            "top_logprobs": body.top_logprobs or 0,
            "top_p": 1.0 if body.top_p is None else body.top_p,
            "truncation": body.truncation or "disabled",
            "usage": None,
            "user": body.user,
        }

    async def _record(
        self, response_id: str, recorder: ResponseRecorder, job: Job, store: bool
    ) -> None:
        """Turn engine outputs into events; drain what has arrived into one append."""
        try:
            while not recorder.done:
                outputs = [await job.outputs.get()]
                while not job.outputs.empty():
                    outputs.append(job.outputs.get_nowait())
                first = recorder.next_seq
                events = [e for out in outputs for e in recorder.on_output(out)]
                append = Append(response_id, first, [NewEvent(e["type"], dumps(e)) for e in events])
                if recorder.done:
                    await self.appender.append(append)
                else:
                    self.appender.submit(append)
        except Exception:
            log.exception("recording %s failed", response_id)
        finally:
            self._running.pop(response_id, None)
        if not store:
            # Keep the rows until the creating client has read them all, then purge on purpose.
            released = self._unreleased.get(response_id)
            if released is not None:
                await released.wait()
            await self.notifier.wait_idle(response_id)
            await self.store.purge([response_id, request_stream(response_id)])

    def release(self, response_id: str) -> None:
        """The creating client is done with the stream (read to the end, or gone)."""
        released = self._unreleased.pop(response_id, None)
        if released is not None:
            released.set()

    async def recover(self) -> int:
        """After a crash, give every response left without a terminal event one: its
        generation died with the process. store:false leftovers are purged."""
        unfinished = await self.store.unfinished("response.created", sorted(TERMINAL_TYPES))
        for response_id in unfinished:
            rows = await self.store.read(response_id)
            accepted = await self.store.read(request_stream(response_id), limit=1)
            if accepted and not json.loads(accepted[0].data)["body"]["store"]:
                await self.store.purge([response_id, request_stream(response_id)])
                continue
            first = rows[-1].seq + 1
            recorder = ResponseRecorder.resume(
                fold_response([(r.type, r.data) for r in rows]), first
            )
            events = recorder.on_failed(
                Failed("The server restarted before this response finished.")
            )
            await self.appender.append(
                Append(response_id, first, [NewEvent(e["type"], dumps(e)) for e in events])
            )
        if unfinished:
            log.warning("recovered %d unfinished responses after a restart", len(unfinished))
        return len(unfinished)

    def cancel_running(self, response_id: str) -> None:
        """Stop a running generation at the next token (the recorder writes the end)."""
        job = self._running.get(response_id)
        if job is not None:
            job.cancel()

    async def delete(self, response_id: str) -> dict[str, Any]:
        await self._accepted(response_id)
        seq = await self.store.next_seq(request_stream(response_id))
        try:
            await self.appender.append(
                Append(request_stream(response_id), seq, [NewEvent(DELETED, "{}")])
            )
        except SeqConflict:
            raise NotFound(f"No response found with id '{response_id}'.") from None
        self.cancel_running(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def close(self) -> None:
        for job in self._running.values():
            job.cancel()
        for released in self._unreleased.values():
            released.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)

    # --- queries --------------------------------------------------------------

    async def _accepted(self, response_id: str) -> dict[str, Any]:
        """The accepted request of a stored, undeleted response, else 404."""
        rows = await self.store.read(request_stream(response_id))
        if not rows or rows[0].type != ACCEPTED or any(r.type == DELETED for r in rows):
            raise NotFound(f"No response found with id '{response_id}'.")
        request: dict[str, Any] = json.loads(rows[0].data)
        if not request["body"]["store"]:
            raise NotFound(f"No response found with id '{response_id}'.")
        return request

    async def retrieve(self, response_id: str) -> dict[str, Any]:
        await self._accepted(response_id)
        return await self.snapshot(response_id)

    async def snapshot(self, response_id: str) -> dict[str, Any]:
        """The response as its log stands (a terminal event is read alone)."""
        last = await self.store.last(response_id)
        if last is not None and is_terminal(last):
            return dict(json.loads(last.data)["response"])
        rows = await self.store.read(response_id)
        return fold_response([(r.type, r.data) for r in rows])

    def events(self, response_id: str, after: int = -1) -> AsyncIterator[StoredEvent | None]:
        return follow(self.store, self.notifier, response_id, after, is_terminal, self.keepalive)

    async def wait(self, response_id: str) -> dict[str, Any]:
        """Follow to the terminal event and return the final response."""
        async for event in self.events(response_id):
            if event is not None and is_terminal(event):
                return dict(json.loads(event.data)["response"])
        raise AssertionError("follow ended without a terminal event")

    async def input_items(
        self, response_id: str, after: str | None, limit: int, order: str
    ) -> dict[str, Any]:
        request = await self._accepted(response_id)
        return page_items(request["input"], after, limit, order)  # type: ignore[arg-type]

    async def _history(self, previous_id: str | None) -> list[dict[str, Any]]:
        """The chain's input and output items, oldest first (instructions are not carried)."""
        if previous_id is None:
            return []
        try:
            request = await self._accepted(previous_id)
        except NotFound:
            raise InvalidRequest(
                f"Previous response with id '{previous_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            ) from None
        previous = await self.snapshot(previous_id)
        if previous.get("status") not in ("completed", "incomplete", "failed", "cancelled"):
            raise InvalidRequest(
                f"Previous response '{previous_id}' is still {previous.get('status')}.",
                param="previous_response_id",
            )
        earlier = await self._history(request["body"].get("previous_response_id"))
        return earlier + request["input"] + previous["output"]


__all__ = ["ResponsesService", "Finished", "dumps", "is_terminal"]
