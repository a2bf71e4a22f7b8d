"""Compaction: the model served writes a summary of a conversation (a response of its own, on
the log like any other, under Omni's own prompt) and the window that replaces the
conversation is sealed into a `compaction` item. `POST /v1/responses/compact` returns that
item; a create whose input ends with `compaction_trigger` (Codex's remote compaction) is a
response whose output is that item alone; `context_management` makes one before a response
whose prompt is past its threshold, and the response goes on from it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni.errors import InvalidRequest, OmniError
from omni.ids import new_id
from omni.ports.jobs import Finished, Job, Sampling
from omni.protocol.recorder import ResponseRecorder
from omni.schemas.responses import ResponseCreate
from omni.service.compaction import (
    COMPACTION,
    SUMMARY_TOKENS,
    sealed_window,
    summary_request,
    threshold,
    window,
)
from omni.service.plan import RunPlan
from omni.service.requests import accepted_request, function_tools
from omni.service.run import Run
from omni.service.sealing import FOR_WINDOW

if TYPE_CHECKING:
    from omni.service.responses import ResponsesService

# Metadata that marks a response as a compaction's summary, for whoever reads the log.
SUMMARY_METADATA = {"omni_compaction": "summary"}


class Compactor:
    def __init__(self, responses: ResponsesService):
        self.responses = responses

    async def compact(self, body: ResponseCreate, owner: str | None) -> dict[str, Any]:
        """`responses.compact`: the compacted window of the request's conversation (its
        input, after previous_response_id's chain or a conversation's items). The summary
        takes at most SUMMARY_TOKENS, or `max_output_tokens` (Omni's extension) if fewer."""
        self.responses.check_model(body.model)
        history, items = await self.responses.context(body, owner)
        tokens = min(body.max_output_tokens or SUMMARY_TOKENS, SUMMARY_TOKENS)
        item, summary = await self.seal(body, [*history, *items], owner, tokens)
        return {
            "id": summary["id"],
            "object": "response.compaction",
            "created_at": summary["created_at"],
            "output": [item],
            "usage": summary["usage"],
        }

    async def respond(
        self,
        body: ResponseCreate,
        history: list[dict[str, Any]],
        items: list[dict[str, Any]],
        owner: str | None,
    ) -> dict[str, Any]:
        """A create whose input ends with `compaction_trigger`: a response, complete from
        its first event, whose output is the compaction item of everything before the
        trigger (its usage the summary's). No generation of its own runs."""
        responses = self.responses
        item, summary = await self.seal(body, [*history, *items[:-1]], owner)
        async with responses.models.use(body.model, body.adapter_path, body.draft_model) as engine:
            responses.runs.check_capacity()
            response = responses.new_response(
                body, function_tools(body), engine.model_id, Sampling()
            )
            recorder = ResponseRecorder(response, 0)
            used = summary["usage"]
            ended = Finished(
                "stop",
                used["input_tokens"],
                used["output_tokens"],
                used["input_tokens_details"]["cached_tokens"],
            )
            events = [*recorder.opening([item]), *recorder.on_finished(ended)]
            plan = RunPlan(Sampling())
            request = accepted_request(body, items, response, engine, 0, plan, owner)
            request["summary"] = summary["id"]  # the response that wrote its summary
            run = Run(response["id"], recorder, Job([], Sampling()), engine, body.store)
            run.settled = True
            await responses.open_run(run, request, events)
        return response

    async def before(
        self,
        body: ResponseCreate,
        history: list[dict[str, Any]],
        items: list[dict[str, Any]],
        owner: str | None,
    ) -> list[dict[str, Any]]:
        """A create's `context_management`: the compaction item that opens its output when
        its prompt is past the threshold (or beyond the context), else nothing."""
        if not body.context_management:
            return []
        responses = self.responses
        async with responses.models.use(body.model, body.adapter_path, body.draft_model) as engine:
            limit = threshold(body.context_management, engine.capabilities.context_length)
            try:
                prompted = await responses.prompted(engine, body, [*history, *items], items)
                if limit is None or len(prompted.prompt) < limit:
                    return []
            except InvalidRequest as exc:
                if exc.code != "context_length_exceeded":
                    raise
        item, _ = await self.seal(body, [*history, *items], owner)
        return [item]

    async def seal(
        self,
        body: ResponseCreate,
        conversation: list[dict[str, Any]],
        owner: str | None,
        tokens: int = SUMMARY_TOKENS,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The compaction item of `conversation`, and the summary response (of at most
        `tokens`) it holds."""
        summary = await self._summarize(body, conversation, owner, tokens)
        text = "".join(
            part.get("text", "")
            for item in summary["output"]
            if item["type"] == "message"
            for part in item["content"]
        )
        if summary["status"] not in ("completed", "incomplete") or not text.strip():
            raise OmniError(
                f"Compaction failed: its summary ({summary['id']}) ended {summary['status']} "
                "without text."
            )
        responses = self.responses
        async with responses.models.use(body.model, body.adapter_path, body.draft_model) as engine:
            budget = engine.capabilities.context_length  # bytes of user text: about a quarter
        earlier, own = window(conversation, [], responses.open_window)
        sealed = sealed_window([*earlier, *own], text, budget)
        token = responses.sealer.seal(sealed, FOR_WINDOW)
        return {"id": new_id("cmp"), "type": COMPACTION, "encrypted_content": token}, summary

    async def _summarize(
        self,
        body: ResponseCreate,
        conversation: list[dict[str, Any]],
        owner: str | None,
        tokens: int,
    ) -> dict[str, Any]:
        """The summary: a response of the request's model, its instructions and tools (so its
        prompt starts as the conversation's, which the prefix cache holds), that reads the
        conversation and then Omni's prompt, calls no tool and writes plain text."""
        request = body.model_copy(
            update={
                "input": [*conversation, summary_request()],
                "previous_response_id": None,
                "conversation": None,
                "stream": False,
                "background": False,
                "tool_choice": "none",
                "truncation": "auto",  # a conversation past the context: its latest part
                "max_output_tokens": tokens,
                "reasoning": {"effort": "none"},
                "text": None,
                "include": None,
                "top_logprobs": None,
                "metadata": SUMMARY_METADATA,
                "context_management": None,
            }
        )
        responses = self.responses
        created = await responses.create(request, owner)
        try:
            return await responses.wait(created["id"])
        finally:
            responses.cancel_running(created["id"])  # no-op once finished
            responses.release(created["id"])
