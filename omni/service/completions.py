"""Chat and legacy completions over the event log, with stored completions and the replay
cache. Every completion is a stream `chatcmpl-X` / `cmpl-X` of the chunks exactly as sent; a
non-streaming answer is their fold, and a cache hit is a copy of a finished stream."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from omni.engine.chat_recorder import TERMINAL_TYPES, USAGE, ChunkRecorder
from omni.engine.types import Engine, Job, Sampling
from omni.errors import InvalidRequest, NotFound
from omni.events import (
    Append,
    Appender,
    CacheEntry,
    EventStore,
    NewEvent,
    Notifier,
    StoredEvent,
    follow,
)
from omni.ids import new_id
from omni.projections.completions import fold_chat, fold_text
from omni.projections.messages import merge_system
from omni.schemas.chat import ChatCompletionCreate, CompletionCreate
from omni.service.runs import Run, Runs
from omni.service.streams import ACCEPTED, dumps, request_stream

MIRROR_PAGE = 512


def is_end(event: StoredEvent) -> bool:
    return event.type in TERMINAL_TYPES


def cache_key(model_id: str, body: ChatCompletionCreate) -> str | None:
    """The replay-cache key of a deterministic request (temperature 0, or a seed), else None."""
    if not (body.temperature == 0 or body.seed is not None):
        return None
    normal = {
        "model": model_id,
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in body.messages],
        "sampling": [body.temperature, body.top_p, body.stop, body.limit, body.sampling_fields()],
        "logprobs": [body.logprobs, body.top_logprobs],
        "tools": [body.tools, body.tool_choice, body.parallel_tool_calls],
        "format": body.response_format,
    }
    return hashlib.sha256(json.dumps(normal, sort_keys=True).encode()).hexdigest()


class CompletionsService:
    def __init__(
        self,
        store: EventStore,
        appender: Appender,
        notifier: Notifier,
        engine: Engine,
        runs: Runs,
        keepalive: float = 15.0,
        cache: bool = True,
    ):
        self.store = store
        self.appender = appender
        self.notifier = notifier
        self.engine = engine
        self.runs = runs
        self.keepalive = keepalive
        self.cache = cache
        self._inflight: dict[str, str] = {}  # cache key -> completion generating it
        self._tasks: set[asyncio.Task[None]] = set()

    # --- create ---------------------------------------------------------------

    async def create_chat(
        self, body: ChatCompletionCreate, bypass_cache: bool = False
    ) -> tuple[str, bool]:
        """Start (or replay) a chat completion; returns its id and whether it is a cache hit."""
        self.runs.check_capacity()
        messages = merge_system(
            [{**m.model_dump(exclude_none=True), "content": m.text()} for m in body.messages]
        )
        prompt = self._check_length(self.engine.render(messages, body.tools or []))
        key = cache_key(self.engine.model_id, body) if self.cache else None
        if key is not None and not bypass_cache:
            original = self._inflight.get(key) or await self.store.cache_lookup(key)
            if original is not None:
                return await self._mirror(original, body, key), True
        cid = new_id("chatcmpl").replace("chatcmpl_", "chatcmpl-")
        logprobs = body.top_logprobs if body.logprobs else None
        if body.logprobs and logprobs is None:
            logprobs = 0
        recorder = ChunkRecorder(
            "chat",
            cid,
            body.model or self.engine.model_id,
            int(time.time()),
            stops=body.stop,
            logprobs=body.logprobs,  # type: ignore[arg-type]
        )
        limit = body.limit or max(1, self.engine.context_length - len(prompt))
        sampling = self._sampling(body, limit, logprobs)
        await self._start(cid, "chat", body, recorder, prompt, sampling, key)
        return cid, False

    async def create_text(self, body: CompletionCreate) -> str:
        self.runs.check_capacity()
        prompt = self._check_length(self.engine.encode(body.prompt))  # type: ignore[arg-type]
        cid = new_id("cmpl").replace("cmpl_", "cmpl-")
        recorder = ChunkRecorder(
            "text",
            cid,
            body.model or self.engine.model_id,
            int(time.time()),
            stops=body.stop,
            logprobs=body.logprobs is not None,  # type: ignore[arg-type]
            prefix=body.prompt if body.echo else "",  # type: ignore[arg-type]
        )
        sampling = self._sampling(body, body.max_tokens or 16, body.logprobs)
        await self._start(cid, "text", body, recorder, prompt, sampling, None)
        return cid

    def _check_length(self, prompt: list[int]) -> list[int]:
        if len(prompt) >= self.engine.context_length:
            raise InvalidRequest(
                f"The prompt is {len(prompt)} tokens; this model's context is "
                f"{self.engine.context_length} tokens.",
                param="messages",
                code="context_length_exceeded",
            )
        return prompt

    def _sampling(self, body: Any, limit: int, logprobs: int | None) -> Sampling:
        return Sampling(
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            max_tokens=limit,
            logprobs=logprobs,
            **body.sampling_fields(),
        )

    async def _start(
        self,
        cid: str,
        kind: str,
        body: Any,
        recorder: ChunkRecorder,
        prompt: list[int],
        sampling: Sampling,
        key: str | None,
    ) -> None:
        request = {
            "kind": kind,
            "body": body.model_dump(mode="json"),
            "key": key,
            "prompt_tokens": len(prompt),
            "created": recorder.base["created"],
        }
        opening = [NewEvent(t, dumps(d)) for t, d in recorder.opening()]
        await self.appender.append(
            Append(request_stream(cid), 0, [NewEvent(ACCEPTED, dumps(request))]),
            Append(cid, 0, opening),
        )
        if key is not None:
            self._inflight[key] = cid
        self.runs.start(Run(cid, recorder, Job(prompt, sampling), cache_key=key))
        if key is not None:
            self._track(self._forget_when_done(key, cid))

    async def _forget_when_done(self, key: str, cid: str) -> None:
        async for event in self.events(cid):
            if event is not None and is_end(event):
                break
        if self._inflight.get(key) == cid:
            del self._inflight[key]

    async def _mirror(self, original: str, body: ChatCompletionCreate, key: str) -> str:
        """A new completion whose chunks are the original's, under a new id: at once for a
        finished original (a cache hit), live for one still generating (single flight)."""
        cid = new_id("chatcmpl").replace("chatcmpl_", "chatcmpl-")
        request = {
            "kind": "chat",
            "body": body.model_dump(mode="json"),
            "key": key,
            "mirror_of": original,
        }
        await self.appender.append(
            Append(request_stream(cid), 0, [NewEvent(ACCEPTED, dumps(request))])
        )
        run = self.runs.get(original)
        if run is not None:
            run.mirrors += 1  # its own client leaving must not cut us off
        self._track(self._copy(original, cid, run))
        return cid

    async def _copy(self, original: str, cid: str, run: Run | None) -> None:
        old, new = f'"id":"{original}"', f'"id":"{cid}"'
        seq = 0
        try:
            async for event in follow(
                self.store, self.notifier, original, -1, is_end, self.keepalive, page=MIRROR_PAGE
            ):
                if event is None:
                    continue
                append = Append(cid, seq, [NewEvent(event.type, event.data.replace(old, new, 1))])
                seq += 1
                # A page read at once is queued at once, so it commits as one transaction.
                if is_end(event):
                    await self.appender.append(append)
                else:
                    self.appender.submit(append)
        finally:
            if run is not None:
                run.mirrors -= 1

    def _track(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def rebuild_cache(self) -> int:
        """Rebuild the replay-cache index from the log: every finished, generated (not copied)
        deterministic completion, the newest per key. Returns the number of entries."""
        newest: dict[str, str] = {}
        for event in await self.store.by_type(ACCEPTED):
            if not event.stream_id.startswith("chatcmpl-"):
                continue
            request = json.loads(event.data)
            if request.get("key") is None or "mirror_of" in request:
                continue
            cid = event.stream_id.removesuffix("/request")
            last = await self.store.last(cid)
            if last is not None and last.type == USAGE["chat"]:
                newest[request["key"]] = cid
        entries = [CacheEntry(key, cid) for key, cid in newest.items()]
        await self.store.cache_rebuild(entries)
        return await self.store.cache_size()

    def cancel_running(self, cid: str) -> None:
        self.runs.cancel(cid, unless_mirrored=True)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()

    # --- read -----------------------------------------------------------------

    def events(self, cid: str, after: int = -1) -> AsyncIterator[StoredEvent | None]:
        return follow(self.store, self.notifier, cid, after, is_end, self.keepalive)

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
