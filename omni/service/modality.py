"""What the server asks of every modality's service (responses, completions, embeddings,
speech, image generation, transcriptions): the kinds of object it records, to recover what a
crash (or a dead server's expired lease) left open, and to close. omni.server builds them, and
recovers, takes over and closes them in loops over one tuple."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from omni.events import Append, Appender, EventLog, NewEvent
from omni.metrics import UNREAD, Metrics
from omni.service.leasing import Leasing
from omni.service.streams import dumps

log = logging.getLogger(__name__)


class Modality(Protocol):
    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of object it records (omni.vocabulary), whose ids ID_PREFIXES begin."""
        ...

    async def recover(self, among: Sequence[str] | None = None) -> int:
        """Take up what a crash left open (of those `among` these streams): end it, or run
        it on. Returns how many."""
        ...

    async def close(self) -> None:
        """Let what runs end (or be left for the next start) before the models close."""
        ...


def error_body(message: str, code: str) -> dict[str, Any]:
    """OpenAI's error body of a server error (`code`: server_error, cancelled, ...)."""
    return {"error": {"message": message, "type": "server_error", "param": None, "code": code}}


def failure(stream_id: str, message: str) -> dict[str, Any]:
    """The data of a request's failed ending: its id and OpenAI's error body."""
    return {"id": stream_id, **error_body(message, "server_error")}


def now_ms() -> int:
    """The time in milliseconds, as a request's timings record it."""
    return time.time_ns() // 1_000_000


def submit_end(
    appender: Appender,
    stream_id: str,
    seq: int,
    type_: str,
    model_id: str,
    timings: dict[str, int],
    fields: dict[str, Any],
) -> asyncio.Future[Any]:
    """A request's ending, queued (awaited but where the request was cancelled): its id, its
    model, `fields` and its timings, finished now."""
    data = {"id": stream_id, "model": model_id, **fields,
            "timings": {**timings, "finished_at": now_ms()}}  # fmt: skip
    return appender.submit(Append(stream_id, seq, [NewEvent(type_, dumps(data))]))


@dataclass(frozen=True)
class LeftOpen:
    """What a crash leaves of a modality's requests: streams opened by `opened` and not ended
    by one of `ends`; `ending` gives the type and data of one's ending."""

    opened: str
    ends: frozenset[str]
    ending: Callable[[str], tuple[str, dict[str, Any]]]
    what: str  # for the log: "speech requests", ...

    @classmethod
    def failing(cls, opened: str, ends: frozenset[str], failed: str, message: str, what: str
                ) -> LeftOpen:  # fmt: skip
        """Each ended by `failed`, OpenAI's server error saying `message`."""
        return cls(opened, ends, lambda stream_id: (failed, failure(stream_id, message)), what)

    async def end(
        self,
        store: EventLog,
        appender: Appender,
        leasing: Leasing,
        among: Sequence[str] | None = None,
    ) -> int:
        """End every one this server may take (of those `among` these): its client went with
        the old process. Its ending follows its last event. Returns how many."""
        ended = 0
        unfinished = await store.unfinished(self.opened, sorted(self.ends))
        async with leasing.taking(unfinished, among) as taken:
            for stream_id in taken:
                type_, data = self.ending(stream_id)
                seq = await store.next_seq(stream_id)
                await appender.append(Append(stream_id, seq, [NewEvent(type_, dumps(data))]))
                ended += 1
        if ended:
            log.warning("ended %d %s a restart interrupted", ended, self.what)
        return ended


Source = TypeVar("Source")


class ModelRequests(Generic[Source]):
    """What the services of the model-process modalities (embeddings, speech, image
    generation, transcription) share: each request a stream, its ending written by the
    service, its model from `models` (the pool, as the modality's port); at a start, those a
    crash left open are ended failed (`left_open`)."""

    kinds: ClassVar[tuple[str, ...]]
    left_open: ClassVar[LeftOpen]

    def __init__(
        self,
        store: EventLog,
        appender: Appender,
        models: Source,
        *,
        leasing: Leasing | None = None,
        metrics: Metrics = UNREAD,
    ):
        self.store = store
        self.appender = appender
        self.models = models
        self.metrics = metrics
        self.leasing = leasing or Leasing()

    async def recover(self, among: Sequence[str] | None = None) -> int:
        """End every request a crash left open (its client went with the old process), of
        those `among` these. Returns how many."""
        return await self.left_open.end(self.store, self.appender, self.leasing, among)

    async def close(self) -> None:
        """Nothing to wait for, unless a service says otherwise: an ending is written before
        the answer's last piece leaves."""
