"""Anthropic's Messages API over the event log. Every message is a stream `msg_X` of its events
exactly as streamed (Anthropic's types); a non-streamed answer is their fold, a replay-cache
hit a copy of a finished stream, and a stored message can be read again, whole or as its
stream. A message is planned and generated as its chat completion would be
(omni.service.message_input): the same engines, batched with every other request, the same
prefix cache, grammar, thinking and tool calls; only its recorder speaks Anthropic's events."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Awaitable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from omni.errors import NotFound
from omni.events import StoredEvent, follow, follow_pages
from omni.ids import new_id
from omni.ports.chat import Engine
from omni.projections.messages import fold_message
from omni.protocol.chat_recorder import ChunkRecorder
from omni.protocol.message_recorder import MessageRecorder, message_error
from omni.schemas.chat import ChatCompletionCreate
from omni.schemas.messages import MessageCreate, MessagesRequest
from omni.service.completions import CompletionsService
from omni.service.flights import Flights, cache_key, is_message_end
from omni.service.message_input import as_chat
from omni.service.modality import LeftOpen
from omni.service.ownership import visible
from omni.service.sealing import Sealer
from omni.service.streams import request_stream
from omni.vocabulary import ACCEPTED, MESSAGE, MESSAGE_ENDS, MESSAGE_START

RESTARTED = "The server restarted before this message finished."
LEFT_OPEN = LeftOpen(MESSAGE_START, MESSAGE_ENDS, lambda _: message_error(RESTARTED), "messages")


class MessagesService:
    kinds = (MESSAGE,)

    def __init__(self, completions: CompletionsService, sealer: Sealer):
        self.completions = completions  # what plans and starts a message's generation
        self.sealer = sealer  # a thinking block's signature, as reasoning is sealed
        self.store = completions.store
        self.runs = completions.runs
        self.flights = Flights(
            completions.store,
            completions.appender,
            completions.notifier,
            completions.runs,
            completions.keepalive,
            completions.metrics,
            kind=MESSAGE,
        )

    # --- create ---------------------------------------------------------------

    async def create(
        self, body: MessageCreate, owner: str | None = None, bypass_cache: bool = False
    ) -> tuple[str, bool]:
        """Start (or replay) `owner`'s message; returns its id and whether it is a cache hit."""
        self.runs.check_capacity()
        chat = as_chat(body)
        async with self._model(chat) as engine:
            self.runs.check_capacity(engine)
            return await self._create(engine, body, chat, owner, bypass_cache)

    async def _create(
        self,
        engine: Engine,
        body: MessageCreate,
        chat: ChatCompletionCreate,
        owner: str | None,
        bypass_cache: bool,
    ) -> tuple[str, bool]:
        completions = self.completions
        prompt, plan, images = await completions.chat_plan(engine, chat, owner)
        key = None
        if completions.cache:
            key = cache_key(engine.model_id, chat, plan.sampling, owner, MESSAGE)
        mid = new_id("msg")

        def generate(leased: tuple[str, ...] = ()) -> Awaitable[None]:
            chunks = ChunkRecorder(
                "chat",
                mid,
                engine.model_id,
                int(time.time()),
                stops=chat.stop,
                splitter=plan.splitter(engine),
                thinker=plan.thinker(engine, prompt),
            )
            recorder = MessageRecorder(chunks, mid, engine.model_id, len(prompt), self._seal)
            return completions.start(
                engine, mid, MESSAGE, body, recorder, prompt, plan, key, owner, leased, images,
                self.flights,
            )  # fmt: skip

        if key is None or bypass_cache:
            await generate()
            return mid, False
        return mid, await self.flights.answer(key, mid, body, owner, generate)

    def _model(self, chat: ChatCompletionCreate) -> AbstractAsyncContextManager[Engine]:
        """The engine of the chat model `chat` asks for, while it is used."""
        return self.completions.models.use(chat.model, chat.adapter_path, chat.draft_model)

    def _seal(self, thinking: str) -> str:
        return self.sealer.seal([{"type": "reasoning_text", "text": thinking}])

    async def count_tokens(self, body: MessagesRequest, owner: str | None = None) -> int:
        """The prompt's tokens (system, tools and images included), as a create would use."""
        chat = as_chat(body)
        async with self._model(chat) as engine:
            prompt, _, _ = await self.completions.chat_plan(engine, chat, owner)
        return len(prompt)

    def release(self, mid: str) -> None:
        """The client of `mid` is done with it (read to the end, or gone)."""
        self.flights.release(mid)

    def cancel_running(self, mid: str) -> None:
        self.flights.cancel_running(mid)

    async def recover(self, among: Sequence[str] | None = None) -> int:
        """End every message a crash left open (its client went with the old process) with
        Anthropic's error event. Returns how many."""
        return await LEFT_OPEN.end(self.store, self.completions.appender, self.runs.leasing, among)

    async def close(self) -> None:
        self.flights.close()

    # --- read -----------------------------------------------------------------

    def events(self, mid: str, after: int = -1) -> AsyncGenerator[StoredEvent | None, None]:
        return follow(
            self.store, self.completions.notifier, mid, after, is_message_end,
            self.completions.keepalive,
        )  # fmt: skip

    def pages(self, mid: str, after: int = -1) -> AsyncGenerator[list[StoredEvent] | None, None]:
        """events(), a read at a time (a stream sends each in one write)."""
        return follow_pages(
            self.store, self.completions.notifier, mid, after, is_message_end,
            self.completions.keepalive,
        )  # fmt: skip

    async def wait(self, mid: str) -> list[StoredEvent]:
        return [e async for e in self.events(mid) if e is not None]

    async def check(self, mid: str, owner: str | None) -> None:
        """404 unless `mid` is a message `owner` may read."""
        rows = await self.store.read(request_stream(mid), -1, 1)
        if not (rows and rows[0].type == ACCEPTED):
            raise NotFound(f"No message found with id '{mid}'.")
        request = json.loads(rows[0].data)
        if request.get("kind") != MESSAGE or not visible(request, owner):
            raise NotFound(f"No message found with id '{mid}'.")

    async def retrieve(self, mid: str, owner: str | None = None) -> dict[str, Any]:
        """A stored message, folded from its events (as far as they go)."""
        await self.check(mid, owner)
        return fold_message([(e.type, e.data) for e in await self.store.read(mid)])

    @staticmethod
    def fold(events: list[StoredEvent]) -> dict[str, Any]:
        return fold_message([(e.type, e.data) for e in events])
