"""Chat and legacy completions over the event log, with stored completions and the replay
cache. Every completion is a stream `chatcmpl-X` / `cmpl-X` of the chunks exactly as sent; a
non-streaming answer is their fold, and a cache hit is a copy of a finished stream."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import astuple
from typing import Any, TypeVar

from omni.errors import InvalidRequest, NotFound, StoreError
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
from omni.projections.messages import chat_content, chat_for_template
from omni.protocol.chat_recorder import ChunkRecorder, error_event
from omni.schemas.chat import ChatCompletionCreate, CompletionCreate
from omni.service.defaults import Defaults
from omni.service.image_urls import Fetcher
from omni.service.images import load_images, message_images, pictures, refuse_images
from omni.service.models import Models
from omni.service.ownership import cache_namespace
from omni.service.plan import RunPlan
from omni.service.prompting import Prompter, refuse_unfittable, text_bytes
from omni.service.reasoning import thinking_plan
from omni.service.requests import rendered
from omni.service.runs import Run, Runs
from omni.service.streams import dumps, request_stream
from omni.service.unwritten import end_unwritten
from omni.settings import ServerSettings
from omni.tools.policy import tool_policy
from omni.tools.schema import decoding_constraint
from omni.vocabulary import ACCEPTED, COMPLETION_CHUNK, COMPLETION_ENDS

MIRROR_PAGE = 512
# A twin on another server waits this long at most for the leader's request to be in the log.
REMOTE_POLLS, REMOTE_POLL_S = 40, 0.05
RESTARTED = "The server restarted before this completion finished."
log = logging.getLogger(__name__)
Body = TypeVar("Body", ChatCompletionCreate, CompletionCreate)


def is_end(event: StoredEvent) -> bool:
    return event.type in COMPLETION_ENDS


def flight_lease(key: str) -> str:
    """The lease that says which server generates a replay-cache key now."""
    return f"flight:{key}"


def cache_key(
    model_id: str, body: ChatCompletionCreate, sampling: Sampling, owner: str | None = None
) -> str | None:
    """The replay-cache key of `owner`'s deterministic request, else None. Deterministic is
    judged on the sampling it runs with (the request's, else the operator's or the model's):
    temperature 0 or a seed. Owners never share answers: another key's entry is another key's
    data."""
    if not (sampling.temperature == 0 or sampling.seed is not None):
        return None
    normal = {
        "owner": owner,
        "model": model_id,
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in body.messages],
        "sampling": [astuple(sampling), body.stop],
        "logprobs": [body.logprobs, body.top_logprobs],
        "tools": [body.tools, body.tool_choice, body.parallel_tool_calls],
        "format": body.response_format,
        "reasoning": body.reasoning_effort,
    }
    return hashlib.sha256(json.dumps(normal, sort_keys=True).encode()).hexdigest()


class CompletionsService:
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
    ):
        self.defaults = defaults or Defaults()
        self.store_by_default = store_by_default
        self.prompter = prompter or Prompter()
        # How http(s) image URLs are fetched (None: --no-image-urls, they are refused).
        self.image_fetcher: Fetcher | None = Fetcher()
        self.store = store
        self.appender = appender
        self.notifier = notifier
        self.models = models if isinstance(models, Models) else Models.single(models)
        self.runs = runs
        self.keepalive = keepalive
        self.cache = cache
        self._inflight: dict[str, str] = {}  # cache key -> completion generating it
        # Unstored copies (mirrors) -> set once their client has read them: then purged.
        self._copies: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.metrics: Metrics = UNREAD  # the app's, once it serves

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
        )
        key = cache_key(engine.model_id, body, sampling, owner) if self.cache else None
        cid = new_id("chatcmpl").replace("chatcmpl_", "chatcmpl-")
        images = pictures(refs, loaded)
        if key is None or bypass_cache:
            await self._generate(engine, cid, body, prompt, plan, key, owner, images=images)
            return cid, False
        leader = self._leader(key)
        if leader is not None:  # single flight: follow the identical request under way
            await self._mirror(leader, cid, body, key, owner)
            self.metrics.replay_cache.labels("hit").inc()
            return cid, True
        self._inflight[key] = cid  # reserved before any await: concurrent twins follow us
        flight: tuple[str, ...] = ()
        try:
            # Servers sharing the log: one of them generates a stored key at a time, and
            # twins sent to the others follow its stream (a lease on the key says which).
            if body.store and self.runs.leasing.shared:
                if await self.runs.leasing.lead(flight_lease(key)):
                    flight = (flight_lease(key),)
                elif (remote := await self._remote_leader(key)) is not None:
                    await self._mirror(remote, cid, body, key, owner)
                    self.metrics.replay_cache.labels("hit").inc()
                    return cid, True
            original = await self.store.cache.lookup(key)
            if original is not None:
                await self.runs.leasing.release(flight)
                await self._mirror(original, cid, body, key, owner)
                self.metrics.replay_cache.labels("hit").inc()
                return cid, True
            await self._generate(engine, cid, body, prompt, plan, key, owner, flight, images)
            self.metrics.replay_cache.labels("miss").inc()
            return cid, False
        except BaseException:
            self._stop_leading(cid)
            if flight:
                await asyncio.shield(self.runs.leasing.release(flight))
            raise

    async def _remote_leader(self, key: str) -> str | None:
        """The completion another server generates for `key` (it holds the key's lease), once
        its request is in the log: its lease is taken just before. None where that server let
        go meanwhile (its answer is then in the cache, or it failed) or never writes it."""
        for _ in range(REMOTE_POLLS):
            accepted = await self.store.streams_with(ACCEPTED, [("$.key", key)])
            for request in reversed(accepted):
                cid = request.removesuffix("/request")
                last = await self.store.last(cid)
                if last is None or not is_end(last):
                    return cid  # under way: followed live
                break
            if await self.runs.leasing.holder(flight_lease(key)) is None:
                return None
            await asyncio.sleep(REMOTE_POLL_S)
        return None

    def _leader(self, key: str) -> str | None:
        """The completion answering this key right now, unless it is being cancelled."""
        cid = self._inflight.get(key)
        run = self.runs.get(cid) if cid is not None else None
        if run is not None and run.job.stop.is_set():
            return None
        return cid

    def _stop_leading(self, cid: str) -> None:
        """Twins must no longer follow `cid` (it ended, or will not end well)."""
        for key in [k for k, v in self._inflight.items() if v == cid]:
            del self._inflight[key]

    async def _generate(
        self,
        engine: Engine,
        cid: str,
        body: ChatCompletionCreate,
        prompt: list[int],
        plan: RunPlan,
        key: str | None,
        owner: str | None,
        leased: tuple[str, ...] = (),
        images: tuple[bytes, ...] = (),
    ) -> None:
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
        await self._start(
            engine, cid, "chat", body, recorder, prompt, plan, key, owner, leased, images
        )

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
        await self._start(engine, cid, "text", body, recorder, prompt, plan, None, owner)
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

    async def _start(
        self,
        engine: Engine,
        cid: str,
        kind: str,
        body: Any,
        recorder: ChunkRecorder,
        prompt: list[int],
        plan: RunPlan,
        key: str | None,
        owner: str | None,
        leased: tuple[str, ...] = (),
        images: tuple[bytes, ...] = (),
    ) -> None:
        request = {
            "kind": kind,
            "body": body.model_dump(mode="json"),
            "key": key,
            "owner": owner,
            "prompt_tokens": len(prompt),
            "created": recorder.base["created"],
            "plan": plan.to_json(),
        }
        opening = [NewEvent(t, dumps(d)) for t, d in recorder.opening()]
        job = plan.job(prompt, images=images)
        # Not stored (store false, or the server's default said so): purged once read. Only
        # stored chat completions are replayed (the index's source says so).
        run = Run(cid, recorder, job, engine, store=bool(body.store), leased=leased)
        run.on_done = lambda: self._stop_leading(cid)  # failed or cancelled: not to be followed
        await self.runs.open(
            run,
            Append(request_stream(cid), 0, [NewEvent(ACCEPTED, dumps(request))]),
            Append(cid, 0, opening),
        )

    async def _mirror(
        self, original: str, cid: str, body: ChatCompletionCreate, key: str, owner: str | None
    ) -> None:
        """Completion `cid` gets the original's chunks under its own id: at once for a
        finished original (a cache hit), live for one still generating (single flight)."""
        self.runs.hold(original)  # before any await: an unstored original waits for us
        if not body.store:
            self._copies[cid] = asyncio.Event()
        request = {
            "kind": "chat",
            "body": body.model_dump(mode="json"),
            "key": key,
            "owner": owner,
            "mirror_of": original,
        }
        try:
            await self.appender.append(
                Append(request_stream(cid), 0, [NewEvent(ACCEPTED, dumps(request))])
            )
        except BaseException:
            self.runs.let_go(original)
            self._copies.pop(cid, None)
            raise
        self._track(self._copy(original, cid))

    async def _copy(self, original: str, cid: str) -> None:
        old, new = f'"id":"{original}"', f'"id":"{cid}"'
        seq = 0
        unwritten: list[BaseException] = []

        def check(done: asyncio.Future[list[StoredEvent]]) -> None:
            if not done.cancelled() and (exc := done.exception()) is not None:
                unwritten.append(exc)

        try:
            async for event in follow(
                self.store, self.notifier, original, -1, is_end, self.keepalive, page=MIRROR_PAGE
            ):
                if unwritten:
                    raise unwritten[0]  # the copy is cut: its ending says so
                if event is None:
                    continue
                append = Append(cid, seq, [NewEvent(event.type, event.data.replace(old, new, 1))])
                seq += 1
                # A page read at once is queued at once, so it commits as one transaction.
                if is_end(event):
                    await self.appender.append(append)
                else:
                    self.appender.submit(append).add_done_callback(check)
        except StoreError:
            await end_unwritten(self.store, self.appender, cid, False)
        finally:
            self.runs.let_go(original)
            self._stop_leading(cid)
        read = self._copies.get(cid)
        if read is not None:  # unstored: kept until its client has read it, then purged
            try:
                await read.wait()
                await self.notifier.wait_idle(cid)
                await self.store.purge([cid, request_stream(cid)])
            finally:
                self._copies.pop(cid, None)

    def release(self, cid: str) -> None:
        """The client of `cid` is done with it (read to the end, or gone)."""
        self.runs.release(cid)
        if (read := self._copies.get(cid)) is not None:
            read.set()

    def _track(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def recover(self, among: Sequence[str] | None = None) -> int:
        """End every stored completion a crash left open (its client is gone with the old
        process), as a foreground response is ended: an error event, so its stream ends and
        purge can take it (an unstored one was purged at start-up). Returns how many."""
        ended = 0
        for chunk in COMPLETION_CHUNK.values():
            unfinished = await self.store.unfinished(chunk, sorted(COMPLETION_ENDS))
            async with self.runs.leasing.taking(unfinished, among) as taken:
                for cid in taken:
                    type_, data = error_event(RESTARTED)
                    event = NewEvent(type_, dumps(data))
                    seq = await self.store.next_seq(cid)
                    await self.appender.append(Append(cid, seq, [event]))
                    ended += 1
        if ended:
            log.warning("ended %d completions a restart interrupted", ended)
        return ended

    def cancel_running(self, cid: str) -> None:
        self.runs.cancel(cid, unless_mirrored=True)
        run = self.runs.get(cid)
        if run is None or run.job.stop.is_set():
            self._stop_leading(cid)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()

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
