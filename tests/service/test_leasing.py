"""Servers sharing one log (omni.service.leasing): each leases what it runs; a start, or a
server's watch once a lease expires, takes only what no live server holds; a cancel sent to
one server stops the run on the server that owns it. Two servers here share one in-memory
store and one notifier (PostgreSQL's LISTEN/NOTIFY carries the wake-ups between real ones:
tests/cluster/)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from omni.events import MemoryStore, Notifier
from omni.ports.jobs import Delta, Finished
from omni.schemas.chat import ChatCompletionCreate
from omni.schemas.responses import ResponseCreate
from omni.service.flights import flight_lease
from omni.service.leasing import Leasing

from .conftest import ScriptedEngine, serving

BACKGROUND = {"model": "scripted", "input": "hi", "background": True}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "store": True}


def body(**fields: Any) -> ResponseCreate:
    return ResponseCreate.model_validate({**BACKGROUND, **fields})


async def status_of(served: Any, response_id: str) -> str:
    return str((await served.responses.snapshot(response_id))["status"])


async def until(check: Any, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.01)


async def test_a_run_holds_its_lease_while_it_runs_and_lets_go_after() -> None:
    store = MemoryStore()
    engine = ScriptedEngine()
    engine.scripts = [[Delta("a", 1)]]  # no end: it runs until cancelled
    leasing = Leasing(store.leases, "a", shared=True)
    async with serving(store, engine, leasing) as served:
        created = await served.responses.create(body())
        rid = created["id"]
        assert (await store.leases.holder(rid) or ("", 0))[0] == "a"
        await served.responses.cancel(rid)
        await until(lambda: _released(store, rid))


async def _released(store: MemoryStore, stream_id: str) -> bool:
    return await store.leases.holder(stream_id) is None


async def test_a_start_leaves_alone_what_a_live_server_runs() -> None:
    store = MemoryStore()
    notifier = Notifier()
    a_engine, b_engine = ScriptedEngine(), ScriptedEngine()
    a_engine.scripts = [[Delta("a", 1)]]
    a = Leasing(store.leases, "a", shared=True)
    async with serving(store, a_engine, a, notifier) as served_a:
        rid = (await served_a.responses.create(body()))["id"]
        b = Leasing(store.leases, "b", shared=True)
        async with serving(store, b_engine, b, notifier):
            assert b_engine.jobs == []  # B's start ran nothing of A's
            assert await status_of(served_a, rid) in ("queued", "in_progress")
            assert (await store.leases.holder(rid) or ("", 0))[0] == "a"
        await served_a.responses.cancel(rid)


async def test_an_expired_lease_is_taken_over_and_continued_from_its_tokens() -> None:
    store = MemoryStore()
    notifier = Notifier()
    a_engine, b_engine = ScriptedEngine(), ScriptedEngine()
    a_engine.scripts = [[Delta("x", 7), Delta("y", 8)]]  # then A "dies": nothing more
    b_engine.scripts = [[Delta("z", 9), Finished("stop", 3, 3)]]
    # Never renewed, it expires; long enough to be good still when B starts, however slow
    # the machine (and B's, renewed every third of it, never lapses while B runs).
    a = Leasing(store.leases, "a", lease_s=1.0, shared=True)
    async with serving(store, a_engine, a, notifier) as served_a:
        rid = (await served_a.responses.create(body()))["id"]
        await until(lambda: _has_tokens(store, rid, 2))
        b = Leasing(store.leases, "b", lease_s=1.0, shared=True)
        async with serving(store, b_engine, b, notifier) as served_b:
            assert b_engine.jobs == []  # A's lease is still good at B's start

            async def take_over(streams: list[str]) -> None:
                await served_b.responses.recover(streams)

            b.start(take_over)
            await until(lambda: _status_is(served_b, rid, "completed"))
            await b.close()
            assert b_engine.jobs[0].resume_tokens == [7, 8]  # carried on after A's tokens
            rows = await store.read(rid)
            assert [r.seq for r in rows] == list(range(len(rows)))
            final = await served_b.responses.snapshot(rid)
            assert final["output"][0]["content"][0]["text"] == "xyz"


async def _has_tokens(store: MemoryStore, rid: str, n: int) -> bool:
    return (
        len(await store.read(f"{rid}/tokens")) > 0
        and sum(len(r.data.strip("[]").split(",")) for r in await store.read(f"{rid}/tokens")) >= n
    )


async def _status_is(served: Any, rid: str, status: str) -> bool:
    return await status_of(served, rid) == status


async def test_a_cancel_sent_to_another_server_stops_the_run_where_it_runs() -> None:
    store = MemoryStore()
    notifier = Notifier()
    a_engine, b_engine = ScriptedEngine(), ScriptedEngine()
    a_engine.scripts = [[Delta("a", 1)]]
    a = Leasing(store.leases, "a", shared=True)
    b = Leasing(store.leases, "b", shared=True)
    async with serving(store, a_engine, a, notifier) as served_a:
        rid = (await served_a.responses.create(body()))["id"]
        async with serving(store, b_engine, b, notifier) as served_b:
            cancelled = await asyncio.wait_for(served_b.responses.cancel(rid), 30)
            assert cancelled["status"] == "cancelled"
            assert a_engine.jobs[0].stop.is_set()  # A's engine was told to stop


async def test_twins_sent_to_two_servers_generate_once() -> None:
    """The replay cache's single flight across servers: the key's lease says who leads, and
    the twin on the other server follows the leader's stream live."""
    store = MemoryStore()
    notifier = Notifier()
    a_engine, b_engine = ScriptedEngine(), ScriptedEngine()
    a_engine.scripts = [[Delta("Hel", 10)]]  # holds until told to finish, below
    a = Leasing(store.leases, "a", shared=True)
    b = Leasing(store.leases, "b", shared=True)
    chat = ChatCompletionCreate.model_validate(CHAT)
    async with serving(store, a_engine, a, notifier) as served_a:
        leader, hit = await served_a.completions.create_chat(chat)
        assert not hit
        key = json.loads((await store.read(f"{leader}/request"))[0].data)["key"]
        assert key is not None
        assert (await store.leases.holder(flight_lease(key)) or ("", 0))[0] == "a"
        async with serving(store, b_engine, b, notifier) as served_b:
            twin, hit = await served_b.completions.create_chat(chat)
            assert hit and twin != leader and b_engine.jobs == []  # B generated nothing
            a_engine.jobs[0].outputs.put_nowait(Delta("lo", 11))
            a_engine.jobs[0].outputs.put_nowait(Finished("stop", 3, 2))
            first = served_a.completions.fold("chat", await served_a.completions.wait(leader))
            copy = served_b.completions.fold("chat", await served_b.completions.wait(twin))
            assert copy["id"] == twin and copy["choices"] == first["choices"]
            assert first["choices"][0]["message"]["content"] == "Hello"
            await until(lambda: _released(store, flight_lease(key)))
            # Once the leader is done, a third twin on B is a plain cache hit.
            third, hit = await served_b.completions.create_chat(chat)
            assert hit and b_engine.jobs == []
            await served_b.completions.wait(third)
