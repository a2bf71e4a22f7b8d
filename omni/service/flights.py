"""The replay cache's answers and single flight, for chat completions and messages (each API
its own flights, whose keys never meet): a request identical to
one being generated follows it (on this server, or on another sharing the log, whose lease on
the key says it generates it), one already answered is a copy of the stored stream, and only
the rest is generated. A copy is the original's chunks under the new completion's own id."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import astuple
from typing import Any, Protocol

from omni.errors import StoreError
from omni.events import Append, Appender, NewEvent, Notifier, Store, StoredEvent, follow
from omni.metrics import Metrics
from omni.ports.jobs import Sampling
from omni.schemas.chat import ChatCompletionCreate
from omni.service.runs import Runs
from omni.service.streams import dumps, request_stream
from omni.service.unwritten import end_unwritten
from omni.vocabulary import ACCEPTED, CHAT, COMPLETION_ENDS, MESSAGE, MESSAGE_ENDS

MIRROR_PAGE = 512


class Stored(Protocol):
    """A request body a flight answers: whether it is kept, and its JSON."""

    @property
    def store(self) -> bool | None: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


# A twin on another server waits this long at most for the leader's request to be in the log.
REMOTE_POLLS, REMOTE_POLL_S = 40, 0.05


def is_end(event: StoredEvent) -> bool:
    return event.type in COMPLETION_ENDS


def is_message_end(event: StoredEvent) -> bool:
    return event.type in MESSAGE_ENDS


def flight_lease(key: str) -> str:
    """The lease that says which server generates a replay-cache key now."""
    return f"flight:{key}"


def cache_key(
    model_id: str,
    body: ChatCompletionCreate,
    sampling: Sampling,
    owner: str | None = None,
    kind: str = CHAT,
) -> str | None:
    """The replay-cache key of `owner`'s deterministic request, else None. Deterministic is
    judged on the sampling it runs with (the request's, else the operator's or the model's):
    temperature 0 or a seed. Owners never share answers: another key's entry is another key's
    data; nor do APIs (`kind`: a message runs as its chat completion, but answers as one)."""
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
    if kind != CHAT:  # a chat completion's keys stay as the logs already hold them
        normal["kind"] = kind
    return hashlib.sha256(json.dumps(normal, sort_keys=True).encode()).hexdigest()


class Flights:
    def __init__(
        self,
        store: Store,
        appender: Appender,
        notifier: Notifier,
        runs: Runs,
        keepalive: float,
        metrics: Metrics,
        kind: str = CHAT,
    ) -> None:
        self.kind = kind  # what its copies' accepted requests say they are
        self.ends = is_message_end if kind == MESSAGE else is_end
        self.store, self.appender, self.notifier = store, appender, notifier
        self.runs = runs
        self.keepalive = keepalive
        self.metrics = metrics
        self._inflight: dict[str, str] = {}  # cache key -> completion generating it
        # Unstored copies (mirrors) -> set once their client has read them: then purged.
        self._copies: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def answer(
        self,
        key: str,
        cid: str,
        body: Stored,
        owner: str | None,
        generate: Callable[[tuple[str, ...]], Awaitable[None]],
    ) -> bool:
        """Answer `cid` by `key`: a copy of an answer under way or stored (True: a hit), else
        `generate` it, with the leases it holds beside its stream's (False)."""
        leader = self.leader(key)
        if leader is not None:  # single flight: follow the identical request under way
            await self.mirror(leader, cid, body, key, owner)
            self.metrics.replay_cache.labels("hit").inc()
            return True
        self._inflight[key] = cid  # reserved before any await: concurrent twins follow us
        flight: tuple[str, ...] = ()
        try:
            # Servers sharing the log: one of them generates a stored key at a time, and
            # twins sent to the others follow its stream (a lease on the key says which).
            if body.store and self.runs.leasing.shared:
                if await self.runs.leasing.lead(flight_lease(key)):
                    flight = (flight_lease(key),)
                elif (remote := await self._remote_leader(key)) is not None:
                    await self.mirror(remote, cid, body, key, owner)
                    self.metrics.replay_cache.labels("hit").inc()
                    return True
            original = await self.store.cache.lookup(key)
            if original is not None:
                await self.runs.leasing.release(flight)
                await self.mirror(original, cid, body, key, owner)
                self.metrics.replay_cache.labels("hit").inc()
                return True
            await generate(flight)
            self.metrics.replay_cache.labels("miss").inc()
            return False
        except BaseException:
            self.stop_leading(cid)
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
                if last is None or not self.ends(last):
                    return cid  # under way: followed live
                break
            if await self.runs.leasing.holder(flight_lease(key)) is None:
                return None
            await asyncio.sleep(REMOTE_POLL_S)
        return None

    def leader(self, key: str) -> str | None:
        """The completion answering this key right now, unless it is being cancelled."""
        cid = self._inflight.get(key)
        run = self.runs.get(cid) if cid is not None else None
        if run is not None and run.job.stop.is_set():
            return None
        return cid

    def stop_leading(self, cid: str) -> None:
        """Twins must no longer follow `cid` (it ended, or will not end well)."""
        for key in [k for k, v in self._inflight.items() if v == cid]:
            del self._inflight[key]

    async def mirror(
        self, original: str, cid: str, body: Stored, key: str, owner: str | None
    ) -> None:
        """Completion `cid` gets the original's chunks under its own id: at once for a
        finished original (a cache hit), live for one still generating (single flight)."""
        self.runs.hold(original)  # before any await: an unstored original waits for us
        if not body.store:
            self._copies[cid] = asyncio.Event()
        request = {
            "kind": self.kind,
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
                self.store, self.notifier, original, -1, self.ends, self.keepalive, page=MIRROR_PAGE
            ):
                if unwritten:
                    raise unwritten[0]  # the copy is cut: its ending says so
                if event is None:
                    continue
                append = Append(cid, seq, [NewEvent(event.type, event.data.replace(old, new, 1))])
                seq += 1
                # A page read at once is queued at once, so it commits as one transaction.
                if self.ends(event):
                    await self.appender.append(append)
                else:
                    self.appender.submit(append).add_done_callback(check)
        except StoreError:
            await end_unwritten(self.store, self.appender, cid)
        finally:
            self.runs.let_go(original)
            self.stop_leading(cid)
        read = self._copies.get(cid)
        if read is not None:  # unstored: kept until its client has read it, then purged
            try:
                await read.wait()
                await self.notifier.wait_idle(cid)
                await self.store.purge([cid, request_stream(cid)])
            finally:
                self._copies.pop(cid, None)

    def release(self, cid: str) -> None:
        """The client of `cid` (a generation or a copy) is done with it, read to the end or
        gone: an unstored one may go."""
        self.runs.release(cid)
        if (read := self._copies.get(cid)) is not None:
            read.set()

    def cancel_running(self, cid: str) -> None:
        """The client of `cid` went away: its generation stops, unless twins follow it; once
        it stops, new twins no longer follow it."""
        self.runs.cancel(cid, unless_mirrored=True)
        run = self.runs.get(cid)
        if run is None or run.job.stop.is_set():
            self.stop_leading(cid)

    def _track(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
