"""The Responses API's commands over the event log (its queries: omni.service.response_queries)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from omni.errors import InvalidRequest
from omni.events import (
    Append,
    Appender,
    EventLog,
    NewEvent,
    Notifier,
)
from omni.ids import new_id
from omni.metrics import UNREAD, Metrics
from omni.ports.chat import Engine
from omni.ports.jobs import Sampling
from omni.protocol.recorder import ResponseRecorder, usage
from omni.schemas.conversations import conversation_id
from omni.schemas.items import normalize_input
from omni.schemas.responses import ResponseCreate
from omni.service import recovery, references
from omni.service.compaction import COMPACTION, COMPACTION_TRIGGER
from omni.service.compactor import Compactor
from omni.service.conversations import ConversationsService
from omni.service.defaults import Defaults
from omni.service.image_urls import PUBLIC_IMAGES, Fetcher
from omni.service.leasing import Leasing
from omni.service.models import Models
from omni.service.ownership import cache_namespace
from omni.service.plan import RunPlan
from omni.service.prompting import Prompter
from omni.service.requests import accepted_request, initial_response
from omni.service.response_prompt import Prompted, build_prompt
from omni.service.response_queries import ResponseQueries
from omni.service.run import Run
from omni.service.runs import Runs
from omni.service.sealing import FOR_REASONING, FOR_WINDOW, Sealer
from omni.service.serial import ObjectLocks
from omni.service.streams import dumps, request_stream
from omni.service.vision_inputs import pictures
from omni.settings import ServerSettings
from omni.vocabulary import (
    ACCEPTED,
    CANCEL_REQUESTED,
    DELETED,
    FINAL_STATUSES,
    RESPONSE,
)


class ResponsesService(ResponseQueries):
    kinds = (RESPONSE,)

    def __init__(
        self,
        store: EventLog,
        appender: Appender,
        notifier: Notifier,
        models: Models | Engine,
        keepalive: float = ServerSettings.keepalive,
        max_queued: int = ServerSettings.max_queued,
        sealer: Sealer | None = None,
        defaults: Defaults | None = None,
        *,
        leasing: Leasing | None = None,
        metrics: Metrics = UNREAD,
        image_fetcher: Fetcher | None = PUBLIC_IMAGES,
        conversations: ConversationsService | None = None,
    ):
        """`models`: the models served (an engine alone: that one model, loaded);
        `conversations`: where a response's conversation is read and its turn added."""
        self.conversations = conversations or ConversationsService(store, appender)
        self.defaults = defaults or Defaults()
        self.sealer = sealer or Sealer(os.urandom(32))
        super().__init__(store, notifier, keepalive)
        self.appender = appender
        self.models = models if isinstance(models, Models) else Models.single(models)
        self.runs = Runs(store, appender, notifier, max_queued, leasing=leasing, metrics=metrics)
        self.runs.on_crash = lambda response_id: self.recover([response_id])
        self.prompter = Prompter()  # shared with chat: one request's prompt built at a time
        # How http(s) image URLs are fetched (None: --no-image-urls, they are refused).
        self.image_fetcher = image_fetcher
        self.facts = ObjectLocks()  # a response's cancel and delete facts, one at a time
        self.compactor = Compactor(self)  # compactions: summaries written by the model served
        self.turning: set[str] = set()  # conversations whose next response is being created

    # --- commands -------------------------------------------------------------

    def check_model(self, model: str | None) -> None:
        """A 404 for a model not served here, a 400 for an embedding model."""
        self.models.find(model, "chat")

    async def create(self, body: ResponseCreate, owner: str | None = None) -> dict[str, Any]:
        """Accept a request from `owner`: one transaction writes the request and the opening
        events, then the generation runs on its own, recorded whoever listens. Returns the
        response as created."""
        self.check_model(body.model)
        self.runs.check_capacity()
        if body.background and not body.store:
            raise InvalidRequest(
                "Background responses must be stored: background requires store=true.",
                param="background",
            )
        in_conversation = conversation_id(body.conversation)
        self._claim(in_conversation)
        try:
            history, items = await self.context(body, owner)
            if items and items[-1]["type"] == COMPACTION_TRIGGER:
                return await self.compactor.respond(body, history, items, owner)
            # context_management: past its threshold, a compaction first (a generation)
            prelude = await self.compactor.before(body, history, items, owner)
            async with self.models.use(body.model, body.adapter_path, body.draft_model) as engine:
                self.runs.check_capacity(engine)
                return await self._accept(engine, body, owner, history + items, items, prelude)
        finally:  # from here its run, until recorded, holds the conversation
            self.turning.discard(in_conversation)

    def _claim(self, conversation: str | None) -> None:
        """One turn at a time in a conversation (OpenAI's conversation_locked): while another
        response in it is being created, or runs, a create is a 400. A client that has read
        a turn's end finds the conversation free, the turn in it."""
        if conversation is None:
            return
        running = (  # its ending (and so its turn: one transaction) not yet written
            (run.recorder.response.get("conversation") or {}).get("id")
            for run in self.runs.live()
            if isinstance(run.recorder, ResponseRecorder)
            and not (run.recorder.done or run.recorded.is_set())
        )
        if conversation in self.turning or conversation in running:
            raise InvalidRequest(
                "Another process is currently operating on this conversation. Please retry "
                "in a few seconds.",
                param="conversation",
                code="conversation_locked",
            )
        self.turning.add(conversation)

    async def warm_up(self, body: ResponseCreate, owner: str | None = None) -> dict[str, Any]:
        """A create with `generate: false` (the warm-up of OpenAI's WebSocket mode, which Codex
        sends first): the request checked as create() checks it, and a response that is
        complete at once with no output. Nothing runs and nothing is recorded."""
        self.check_model(body.model)
        await self.context(body, owner)
        model_id = self.models.find(body.model, "chat").id
        response = initial_response(new_id("resp"), body, body.tools, model_id, Sampling())
        response["status"] = "completed"
        response["completed_at"] = response["created_at"]
        response["usage"] = usage(0, 0)
        return response

    async def count_input_tokens(self, body: ResponseCreate, owner: str | None = None) -> int:
        """The input tokens a create with this body would prefill, without generating: the
        same context (previous_response_id, conversation), the same prompt (before any
        compaction that `context_management` would make)."""
        self.check_model(body.model)
        history, items = await self.context(body, owner)
        async with self.models.use(body.model, body.adapter_path, body.draft_model) as engine:
            return len((await self.prompted(engine, body, history + items, items)).prompt)

    async def prompted(
        self,
        engine: Engine,
        body: ResponseCreate,
        conversation: list[dict[str, Any]],
        items: list[dict[str, Any]],
    ) -> Prompted:
        """The prompt of `conversation`, whose tail is the request's `items`."""
        return await build_prompt(
            self.prompter, self.image_fetcher, engine, body, conversation, items, self.open_window
        )

    def open_window(self, token: str) -> list[dict[str, Any]]:
        """The window a compaction item seals (its token was checked when it came in)."""
        return self.sealer.open(token, "input", FOR_WINDOW)

    async def context(
        self, body: ResponseCreate, owner: str | None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The items before the request's (its chain's, or its conversation's) and its own,
        normalised, references resolved; a 400 for a request with neither."""
        if body.conversation is not None:  # with previous_response_id too: that 400 first
            history = await self.conversations.context(body, owner)
        else:
            history = await self._history(body.previous_response_id, owner)
        items = normalize_input(body.input)
        for i, item in enumerate(items):  # what comes back sealed must be ours, unaltered
            token = item.get("encrypted_content")
            if item["type"] in ("reasoning", COMPACTION) and token:
                purpose = FOR_WINDOW if item["type"] == COMPACTION else FOR_REASONING
                self.sealer.open(token, f"input[{i}].encrypted_content", purpose)
        items = await references.resolve(
            items, self.store.item_holders, lambda rid: self.stored_items(rid, owner)
        )
        if not items and not history:
            raise InvalidRequest("`input` is required.", param="input")
        return history, items

    async def _accept(
        self,
        engine: Engine,
        body: ResponseCreate,
        owner: str | None,
        conversation: list[dict[str, Any]],
        items: list[dict[str, Any]],
        prelude: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """create(), on the loaded model: the prompt, the plan, the opening events. The
        `prelude` items (a compaction) open the output, and the prompt reads them."""
        prompted = await self.prompted(engine, body, conversation + prelude, items + prelude)
        prompt, shown = prompted.prompt, prompted.shown
        wants_logprobs = "message.output_text.logprobs" in (body.include or [])
        defaults, capabilities = self.defaults, engine.capabilities
        sampling = Sampling(
            max_tokens=defaults.output_cap(
                body.max_output_tokens, capabilities.context_length - len(prompt)
            ),
            logprobs=(body.top_logprobs or 0) if wants_logprobs else None,
            **{
                **body.sampling_fields(),
                **defaults.sampling(body, capabilities.sampling),
                "thinking_budget": prompted.budget,
            },
        )
        plan = RunPlan(
            sampling,
            tuple(prompted.callable_tools),
            prompted.mode,
            body.parallel_tool_calls is not False,
            prompted.thinking,
            prompted.constraint,
            cache_namespace(owner, body.prompt_cache_key),
            session=body.prompt_cache_key is not None or in_session(conversation, items),
        )
        response = self.new_response(body, prompted.tools, engine.model_id, sampling)
        sealed = "reasoning.encrypted_content" in (body.include or [])
        recorder = ResponseRecorder(
            response,
            0,
            plan.splitter(engine),
            plan.thinker(engine, prompt),
            self.sealer.seal if sealed else None,
        )
        request = accepted_request(body, items, response, engine, len(prompt), plan, owner)
        if variant := self.models.variant(self.models.find(engine.model_id)):
            request["variant"] = variant  # adapters, a draft: loaded again by a restart
        if body.background:
            request["prompt"] = prompt  # so a restart can run or continue it exactly
            if shown:  # and the images its image tokens stand for
                request["images"] = [ref.url for ref in shown]
        opening = recorder.opening(prelude)  # before the run: it goes on from their seq
        job = plan.job(prompt, images=pictures(shown, prompted.loaded))
        run = Run(response["id"], recorder, job, engine, body.store, body.background)
        await self.open_run(run, request, opening)
        return response  # as response.created carries it (status queued or in_progress)

    def new_response(
        self, body: ResponseCreate, tools: list[dict[str, Any]], model_id: str, sampling: Sampling
    ) -> dict[str, Any]:
        """A new response as `response.created` carries it, in its conversation if any."""
        response = initial_response(new_id("resp"), body, tools, model_id, sampling)
        if (in_conversation := conversation_id(body.conversation)) is not None:
            response["conversation"] = {"id": in_conversation}
        return response

    async def open_run(
        self, run: Run, request: dict[str, Any], opening: list[dict[str, Any]]
    ) -> None:
        """Commit the accepted `request` and the `opening` events and start `run`, whose
        ending adds its turn to its conversation, if it is in one."""
        recorder = run.recorder
        assert isinstance(recorder, ResponseRecorder)
        run.ending = self.conversations.ending(recorder.response, request["input"], recorder)
        await self.runs.open(
            run,
            Append(request_stream(run.stream_id), 0, [NewEvent(ACCEPTED, dumps(request))]),
            Append(run.stream_id, 0, [NewEvent(e["type"], dumps(e)) for e in opening]),
        )

    async def cancel(self, response_id: str, owner: str | None = None) -> dict[str, Any]:
        """Cancel a background response; a finished one is returned unchanged."""

        async def request_cancel() -> dict[str, Any] | None:
            request = await self._accepted(response_id, owner)
            if not request["body"].get("background"):
                raise InvalidRequest(
                    "Only responses created with background=true can be cancelled.",
                    param="response_id",
                )
            current = await self.snapshot(response_id)
            if current.get("status") in FINAL_STATUSES:
                return current
            await self._append_fact(response_id, CANCEL_REQUESTED)
            return None

        finished = await self.facts.run(response_id, request_cancel)
        if finished is not None:
            return finished
        self.runs.cancel(response_id)
        return await self.wait(response_id)

    async def delete(self, response_id: str, owner: str | None = None) -> dict[str, Any]:
        """One tombstone: of concurrent deletes, the first writes it, the others then find
        the response deleted (404, as OpenAI answers a second delete)."""

        async def tombstone() -> None:
            await self._accepted(response_id, owner)
            await self._append_fact(response_id, DELETED)

        await self.facts.run(response_id, tombstone)
        self.runs.cancel(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def _append_fact(self, response_id: str, type_: str) -> None:
        """Append a fact to the request stream; the caller holds the response's lock."""
        stream = request_stream(response_id)
        seq = await self.store.next_seq(stream)
        await self.appender.append(Append(stream, seq, [NewEvent(type_, "{}")]))

    def cancel_running(self, response_id: str) -> None:
        """A foreground client went away: stop its generation at the next token."""
        self.runs.cancel(response_id)

    def release(self, response_id: str) -> None:
        self.runs.release(response_id)

    async def recover(self, among: Sequence[str] | None = None) -> int:
        return await recovery.recover(self, among)

    async def close(self) -> None:
        await self.runs.close()
        self.prompter.close()


def in_session(conversation: list[dict[str, Any]], items: list[dict[str, Any]]) -> bool:
    """A turn of a multi-turn session: after earlier items (a chain, a conversation), or a
    history resent as input (an answer or a call in it)."""
    return len(conversation) > len(items) or any(
        item["type"] != "message" or item["role"] == "assistant" for item in items
    )
