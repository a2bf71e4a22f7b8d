"""Chat and legacy completions over the event log, with stored completions and the replay
cache. Every completion is a stream `chatcmpl-X` / `cmpl-X` of the chunks exactly as sent; a
non-streaming answer is their fold, and a cache hit is a copy of a finished stream."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Sequence
from typing import Any, TypeVar

from omni.errors import InvalidRequest, NotFound
from omni.events import (
    Append,
    Appender,
    NewEvent,
    Notifier,
    Store,
    StoredEvent,
    follow,
    follow_pages,
)
from omni.ids import new_id
from omni.metrics import UNREAD, Metrics
from omni.ports.chat import Engine
from omni.ports.jobs import Sampling
from omni.projections.completions import fold_chat, fold_text
from omni.projections.template_messages import chat_content, chat_for_template
from omni.protocol.chat_recorder import ChunkRecorder, error_event
from omni.protocol.message_recorder import MessageRecorder
from omni.schemas.chat import ChatCompletionCreate, CompletionCreate
from omni.service.defaults import Defaults
from omni.service.flights import Flights, cache_key, is_end
from omni.service.image_urls import PUBLIC_IMAGES, Fetcher
from omni.service.modality import LeftOpen
from omni.service.models import LOAD_MS, Models
from omni.service.ownership import cache_namespace
from omni.service.plan import RunPlan
from omni.service.prompting import Prompter, refuse_unfittable, text_bytes
from omni.service.reasoning import thinking_plan
from omni.service.requests import rendered
from omni.service.run import Run
from omni.service.runs import Runs
from omni.service.streams import dumps, request_stream
from omni.service.vision_inputs import load_images, message_images, pictures, refuse_images
from omni.settings import ServerSettings
from omni.tools.policy import tool_policy
from omni.tools.schema import decoding_constraint
from omni.vocabulary import ACCEPTED, CHAT, COMPLETION_CHUNK, COMPLETION_ENDS, TEXT

RESTARTED = "The server restarted before this completion finished."
LEFT_OPEN = [
    LeftOpen(chunk, COMPLETION_ENDS, lambda _: error_event(RESTARTED), "completions")
    for chunk in COMPLETION_CHUNK.values()
]
log = logging.getLogger(__name__)
Body = TypeVar("Body", ChatCompletionCreate, CompletionCreate)


class CompletionsService:
    kinds = (CHAT, TEXT)

    def __init__(
        self,
        store: Store,
        appender: Appender,
        notifier: Notifier,
        models: Models | Engine,
        runs: Runs,
        keepalive: float = ServerSettings.keepalive,
        cache: bool = True,
        defaults: Defaults | None = None,
        prompter: Prompter | None = None,
        store_by_default: bool = ServerSettings.store_by_default,
        *,
        metrics: Metrics = UNREAD,
        image_fetcher: Fetcher | None = PUBLIC_IMAGES,
    ):
        self.defaults = defaults or Defaults()
        self.store_by_default = store_by_default
        self.prompter = prompter or Prompter()
        # How http(s) image URLs are fetched (None: --no-image-urls, they are refused).
        self.image_fetcher = image_fetcher
        self.store = store
        self.appender = appender
        self.notifier = notifier
        self.models = models if isinstance(models, Models) else Models.single(models)
        self.runs = runs
        self.keepalive = keepalive
        self.cache = cache
        self.metrics = metrics  # the server's (UNREAD: nobody reads them)
        self.flights = Flights(store, appender, notifier, runs, keepalive, metrics)

    # --- create ---------------------------------------------------------------

    async def create_chat(
        self, body: ChatCompletionCreate, bypass_cache: bool = False, owner: str | None = None
    ) -> tuple[str, bool]:
        """Start (or replay) `owner`'s chat completion; returns its id and whether it is a
        cache hit."""
        self.runs.check_capacity()
        body = self._decided(body)
        async with self.models.use(body.model, body.adapter_path, body.draft_model) as engine:
            self.runs.check_capacity(engine)
            return await self._create_chat(engine, body, bypass_cache, owner)

    def _decided(self, body: Body) -> Body:
        """`body` with `store` decided: the client's word, else the server's default. Its
        accepted request records the decision, so the log says what was done."""
        if body.store is not None:
            return body
        return body.model_copy(update={"store": self.store_by_default})

    async def _create_chat(
        self, engine: Engine, body: ChatCompletionCreate, bypass_cache: bool, owner: str | None
    ) -> tuple[str, bool]:
        prompt, plan, images = await self.chat_plan(engine, body, owner)
        key = cache_key(engine.model_id, body, plan.sampling, owner) if self.cache else None
        cid = new_id("chatcmpl").replace("chatcmpl_", "chatcmpl-")

        def generate(leased: tuple[str, ...] = ()) -> Awaitable[None]:
            recorder = ChunkRecorder(
                "chat",
                cid,
                engine.model_id,
                int(time.time()),
                stops=body.stop,
                logprobs=body.logprobs,
                splitter=plan.splitter(engine),
                thinker=plan.thinker(engine, prompt),
            )
            return self.start(
                engine, cid, "chat", body, recorder, prompt, plan, key, owner, leased, images
            )

        if key is None or bypass_cache:
            await generate()
            return cid, False
        return cid, await self.flights.answer(key, cid, body, owner, generate)

    async def chat_plan(
        self, engine: Engine, body: ChatCompletionCreate, owner: str | None
    ) -> tuple[list[int], RunPlan, tuple[bytes, ...]]:
        """The prompt, the plan and the images of a chat completion on `engine`."""
        tools, mode = tool_policy(body.tools or [], body.tool_choice)
        parallel = body.parallel_tool_calls is not False
        constraint = decoding_constraint(
            engine.capabilities.tool_format,
            tools,
            mode,
            body.response_format,
            "response_format",
            parallel,
        )
        structured = engine.capabilities.template_tools
        refs = message_images([m.content for m in body.messages])
        refuse_images(engine, refs)
        loaded = await load_images(refs, self.image_fetcher)
        messages = chat_for_template(
            [
                {**m.model_dump(exclude_none=True), "content": chat_content(m.content, loaded)}
                for m in body.messages
            ],
            structured,
        )
        thinking, budget = thinking_plan(engine, body.reasoning_effort, body.thinking_budget)
        refuse_unfittable(engine, text_bytes(messages), "messages")
        prompt = await self.prompter.run(
            rendered, engine, messages, tools, mode, structured, "messages", thinking
        )
        logprobs = body.top_logprobs if body.logprobs else None
        if body.logprobs and logprobs is None:
            logprobs = 0
        limit = self.defaults.output_cap(
            body.limit, engine.capabilities.context_length - len(prompt)
        )
        sampling = self._sampling(engine, body, limit, logprobs, thinking_budget=budget)
        plan = RunPlan(
            sampling,
            tuple(tools),
            mode,
            parallel,
            thinking,
            constraint,
            cache_namespace(owner, body.prompt_cache_key),
            session=body.prompt_cache_key is not None
            or any(m.role in ("assistant", "tool") for m in body.messages),
        )
        return prompt, plan, pictures(refs, loaded)

    async def create_text(self, body: CompletionCreate, owner: str | None = None) -> str:
        self.runs.check_capacity()
        body = self._decided(body)
        async with self.models.use(body.model, body.adapter_path, body.draft_model) as engine:
            self.runs.check_capacity(engine)
            return await self._create_text(engine, body, owner)

    async def _create_text(self, engine: Engine, body: CompletionCreate, owner: str | None) -> str:
        text: str = body.prompt  # type: ignore[assignment]
        refuse_unfittable(engine, len(text.encode()), "prompt")
        prompt = self._check_length(engine, await self.prompter.run(engine.encode, text))
        cid = new_id("cmpl").replace("cmpl_", "cmpl-")
        recorder = ChunkRecorder(
            "text",
            cid,
            engine.model_id,
            int(time.time()),
            stops=body.stop,
            logprobs=body.logprobs is not None,
            prefix=body.prompt if body.echo else "",  # type: ignore[arg-type]
        )
        limit = Defaults(max_tokens=16).output_cap(  # OpenAI's legacy default, not the server's
            body.max_tokens, engine.capabilities.context_length - len(prompt)
        )
        sampling = self._sampling(engine, body, limit, body.logprobs)
        plan = RunPlan(sampling, cache_namespace=cache_namespace(owner, None))
        await self.start(engine, cid, "text", body, recorder, prompt, plan, None, owner)
        return cid

    def _check_length(self, engine: Engine, prompt: list[int]) -> list[int]:
        if len(prompt) >= engine.capabilities.context_length:
            raise InvalidRequest(
                f"The prompt is {len(prompt)} tokens; this model's context is "
                f"{engine.capabilities.context_length} tokens.",
                param="prompt",
                code="context_length_exceeded",
            )
        return prompt

    def _sampling(
        self, engine: Engine, body: Any, limit: int, logprobs: int | None, **chosen: Any
    ) -> Sampling:
        """`chosen`: fields the service settled itself, over the body's (a thinking budget);
        what the body leaves out comes from the defaults and the model's recommendation."""
        model = engine.capabilities.sampling
        return Sampling(
            max_tokens=limit,
            logprobs=logprobs,
            **(body.sampling_fields() | self.defaults.sampling(body, model) | chosen),
        )

    async def start(
        self,
        engine: Engine,
        cid: str,
        kind: str,
        body: Any,
        recorder: ChunkRecorder | MessageRecorder,
        prompt: list[int],
        plan: RunPlan,
        key: str | None,
        owner: str | None,
        leased: tuple[str, ...] = (),
        images: tuple[bytes, ...] = (),
        flights: Flights | None = None,
    ) -> None:
        """Record `cid`'s accepted request and opening, and run it (`kind`: chat, text or a
        message, whose `recorder` and `flights` are its own)."""
        flights = flights or self.flights
        request = {
            "kind": kind,
            "body": body.model_dump(mode="json"),
            "key": key,
            "owner": owner,
            "load_ms": LOAD_MS.get(),  # its model's load, if it waited for one
            "prompt_tokens": len(prompt),
            "created": recorder.base["created"],
            "plan": plan.to_json(),
        }
        opening = [NewEvent(t, dumps(d)) for t, d in recorder.opening()]
        job = plan.job(prompt, images=images)
        # Not stored (store false, or the server's default said so): purged once read. Only
        # stored chat completions are replayed (the index's source says so).
        run = Run(cid, recorder, job, engine, store=bool(body.store), leased=leased)
        run.on_done = lambda: flights.stop_leading(cid)  # failed or cancelled: not followed
        await self.runs.open(
            run,
            Append(request_stream(cid), 0, [NewEvent(ACCEPTED, dumps(request))]),
            Append(cid, 0, opening),
        )

    def release(self, cid: str) -> None:
        """The client of `cid` is done with it (read to the end, or gone)."""
        self.flights.release(cid)

    async def recover(self, among: Sequence[str] | None = None) -> int:
        """End every stored completion a crash left open (its client is gone with the old
        process), as a foreground response is ended: an error event, so its stream ends and
        purge can take it (an unstored one was purged at start-up). Returns how many."""
        ended = 0
        for left in LEFT_OPEN:
            ended += await left.end(self.store, self.appender, self.runs.leasing, among)
        return ended

    def cancel_running(self, cid: str) -> None:
        self.flights.cancel_running(cid)

    async def close(self) -> None:
        self.flights.close()

    # --- read -----------------------------------------------------------------

    def events(self, cid: str, after: int = -1) -> AsyncGenerator[StoredEvent | None, None]:
        return follow(self.store, self.notifier, cid, after, is_end, self.keepalive)

    def pages(self, cid: str, after: int = -1) -> AsyncGenerator[list[StoredEvent] | None, None]:
        """events(), a read at a time (a stream sends each in one write)."""
        return follow_pages(self.store, self.notifier, cid, after, is_end, self.keepalive)

    async def wait(self, cid: str) -> list[StoredEvent]:
        return [e async for e in self.events(cid) if e is not None]

    async def request(self, cid: str) -> tuple[dict[str, Any], list[StoredEvent]]:
        rows = await self.store.read(request_stream(cid))
        if not rows or rows[0].type != ACCEPTED:
            raise NotFound(f"No completion found with id '{cid}'.")
        return json.loads(rows[0].data), rows[1:]

    @staticmethod
    def fold(kind: str, events: list[StoredEvent]) -> dict[str, Any]:
        pairs = [(e.type, e.data) for e in events]
        return fold_chat(pairs) if kind == "chat" else fold_text(pairs)
