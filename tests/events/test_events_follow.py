"""follow(): catch up, then wait for wake-ups; never lose one."""

from __future__ import annotations

import asyncio
import random
import time
from contextlib import aclosing

import pytest

from omni.events import (
    KEEPALIVE,
    Append,
    Appender,
    EventStore,
    Notifier,
    StoredEvent,
    follow,
    follow_pages,
)

from ._helpers import deltas, ev, is_terminal

TIMEOUT = 10.0  # fail instead of hanging: room for a loaded machine, below a 30 s keep-alive


async def collect(
    store: EventStore,
    notifier: Notifier,
    stream_id: str,
    after: int = -1,
    keepalive: float = 30.0,
    keep_keepalives: bool = False,
) -> list[StoredEvent | None]:
    out: list[StoredEvent | None] = []
    async with aclosing(follow(store, notifier, stream_id, after, is_terminal, keepalive)) as it:
        async for item in it:
            if item is KEEPALIVE and not keep_keepalives:
                continue
            out.append(item)
    return out


def terminal(stream_id: str, seq: int) -> Append:
    return Append(stream_id, seq, [ev("response.completed", seq=seq)])


async def wait_until(predicate, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.001)


async def test_catch_up_then_live_rows_from_another_task(
    store: EventStore, notifier: Notifier
) -> None:
    early = await store.append([deltas("s", 0, 3)])
    got: list[StoredEvent] = []

    async def follower() -> None:
        async with aclosing(follow(store, notifier, "s", -1, is_terminal, 30.0)) as it:
            async for item in it:
                assert item is not KEEPALIVE
                got.append(item)

    task = asyncio.create_task(follower())
    await wait_until(lambda: len(got) == 3)
    assert got == early  # catch-up: exactly the stored rows
    assert notifier.followers("s") == 1  # now waiting, subscribed

    async def producer() -> list[StoredEvent]:
        out: list[StoredEvent] = []
        for seq in (3, 4):
            await asyncio.sleep(0.005)
            out += await store.append([deltas("s", seq, 1)])
            notifier.notify(["s"])
        await asyncio.sleep(0.005)
        out += await store.append([terminal("s", 5)])
        notifier.notify(["s"])
        return out

    live = await asyncio.wait_for(asyncio.create_task(producer()), TIMEOUT)
    await asyncio.wait_for(task, TIMEOUT)
    assert got == early + live
    assert [e.seq for e in got] == [0, 1, 2, 3, 4, 5]
    assert got[-1].type == "response.completed"
    assert notifier.followers("s") == 0  # released after the terminal event


async def test_stops_at_terminal_inclusive_even_if_more_rows_exist(
    store: EventStore, notifier: Notifier
) -> None:
    # terminal in the middle of one read batch, rows after it already in the log
    await store.append([deltas("s", 0, 2), terminal("s", 2), deltas("s", 3, 3)])
    got = await asyncio.wait_for(collect(store, notifier, "s"), TIMEOUT)
    assert [e.seq for e in got] == [0, 1, 2]  # type: ignore[union-attr]
    assert got[-1].type == "response.completed"  # type: ignore[union-attr]
    assert notifier.followers("s") == 0


async def test_never_yields_beyond_terminal_when_more_rows_arrive_live(
    store: EventStore, notifier: Notifier
) -> None:
    await store.append([deltas("s", 0, 1)])
    got: list[StoredEvent | None] = []

    async def follower() -> None:
        async with aclosing(follow(store, notifier, "s", -1, is_terminal, 30.0)) as it:
            async for item in it:
                got.append(item)

    task = asyncio.create_task(follower())
    await wait_until(lambda: len(got) == 1)
    # terminal and more rows after it commit together
    await store.append([terminal("s", 1), deltas("s", 2, 4)])
    notifier.notify(["s"])
    await asyncio.wait_for(task, TIMEOUT)
    assert [e.seq for e in got] == [0, 1]  # type: ignore[union-attr]


async def test_after_filters_rows(store: EventStore, notifier: Notifier) -> None:
    await store.append([deltas("s", 0, 5), terminal("s", 5)])
    got = await asyncio.wait_for(collect(store, notifier, "s", after=2), TIMEOUT)
    assert [e.seq for e in got] == [3, 4, 5]  # type: ignore[union-attr]
    got = await asyncio.wait_for(collect(store, notifier, "s", after=4), TIMEOUT)
    assert [e.seq for e in got] == [5]  # type: ignore[union-attr]


async def test_after_past_the_end_waits_for_new_rows(store: EventStore, notifier: Notifier) -> None:
    await store.append([deltas("s", 0, 3)])
    task = asyncio.create_task(collect(store, notifier, "s", after=2))
    await wait_until(lambda: notifier.followers("s") == 1)
    await asyncio.sleep(0.02)
    assert not task.done()
    await store.append([terminal("s", 3)])
    notifier.notify(["s"])
    got = await asyncio.wait_for(task, TIMEOUT)
    assert [e.seq for e in got] == [3]  # type: ignore[union-attr]


async def test_resuming_at_or_past_the_end_of_a_finished_stream_ends_at_once(
    store: EventStore, notifier: Notifier
) -> None:
    await store.append([deltas("s", 0, 3), terminal("s", 3)])
    for after in (3, 4, 100):
        start = time.monotonic()
        got = await asyncio.wait_for(
            collect(store, notifier, "s", after=after, keep_keepalives=True), TIMEOUT
        )
        assert got == []  # nothing, not even a keep-alive
        assert time.monotonic() - start < 5.0  # at once: not after the 30 s keep-alive
    assert notifier.followers("s") == 0


async def test_resuming_at_the_end_of_an_unfinished_stream_waits(
    store: EventStore, notifier: Notifier
) -> None:
    await store.append([deltas("s", 0, 3)])
    async with aclosing(follow(store, notifier, "s", 2, is_terminal, keepalive=0.02)) as it:
        assert await asyncio.wait_for(anext(it), TIMEOUT) is KEEPALIVE  # still live
        await store.append([terminal("s", 3)])
        notifier.notify(["s"])
        item = await asyncio.wait_for(anext(it), TIMEOUT)
        while item is KEEPALIVE:
            item = await asyncio.wait_for(anext(it), TIMEOUT)
        assert item.seq == 3


async def test_long_replay_is_read_page_by_page(
    store: EventStore, notifier: Notifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.append([deltas("s", 0, 10), terminal("s", 10), deltas("s", 11, 2)])
    original_read = store.read
    calls: list[tuple[int, int | None]] = []

    async def spy_read(stream_id: str, after: int = -1, limit: int | None = None):
        calls.append((after, limit))
        return await original_read(stream_id, after, limit)

    monkeypatch.setattr(store, "read", spy_read)
    items: list[StoredEvent] = []
    async with aclosing(follow(store, notifier, "s", -1, is_terminal, 30.0, page=4)) as it:
        first = await asyncio.wait_for(anext(it), TIMEOUT)
        assert first is not None and first.seq == 0
        assert calls == [(-1, 4)]  # the first row went out after reading one page only
        items.append(first)
        async for item in it:
            items.append(item)  # type: ignore[arg-type]
    assert [e.seq for e in items] == list(range(11))  # stops at the terminal, not beyond
    assert calls == [(-1, 4), (3, 4), (7, 4)]


async def test_keepalive_yielded_when_nothing_arrives(
    store: EventStore, notifier: Notifier
) -> None:
    await store.append([deltas("s", 0, 1)])
    items: list[StoredEvent | None] = []
    start = time.monotonic()
    async with aclosing(follow(store, notifier, "s", -1, is_terminal, keepalive=0.05)) as it:
        items.append(await asyncio.wait_for(anext(it), TIMEOUT))  # the existing row
        items.append(await asyncio.wait_for(anext(it), TIMEOUT))  # nothing new: keep-alive
        items.append(await asyncio.wait_for(anext(it), TIMEOUT))  # and again
        elapsed = time.monotonic() - start
        assert notifier.followers("s") == 1  # still subscribed between keep-alives
        await store.append([terminal("s", 1)])
        notifier.notify(["s"])
        items.append(await asyncio.wait_for(anext(it), TIMEOUT))
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(it), TIMEOUT)
    assert items[0] is not None and items[0].seq == 0
    assert items[1] is KEEPALIVE and items[2] is KEEPALIVE
    assert items[3] is not None and items[3].seq == 1
    assert 0.09 <= elapsed < 2.0  # two keep-alive intervals, not the default 15 s
    assert notifier.followers("s") == 0


async def test_keepalive_on_empty_stream(store: EventStore, notifier: Notifier) -> None:
    async with aclosing(follow(store, notifier, "nothing", -1, is_terminal, keepalive=0.02)) as it:
        assert await asyncio.wait_for(anext(it), TIMEOUT) is KEEPALIVE


async def test_closing_a_follower_early_releases_the_subscription(
    store: EventStore, notifier: Notifier
) -> None:
    await store.append([deltas("s", 0, 3)])
    async with aclosing(follow(store, notifier, "s", -1, is_terminal, 30.0)) as it:
        first = await anext(it)
        assert first is not None and first.seq == 0
        assert notifier.followers("s") == 1
    assert notifier.followers("s") == 0
    await asyncio.wait_for(notifier.wait_idle("s"), 1)


async def test_notify_for_another_stream_does_not_deliver_rows(
    store: EventStore, notifier: Notifier
) -> None:
    await store.append([deltas("s", 0, 1)])
    async with aclosing(follow(store, notifier, "s", -1, is_terminal, keepalive=0.2)) as it:
        assert (await anext(it)).seq == 0  # type: ignore[union-attr]
        await store.append([deltas("t", 0, 1)])
        notifier.notify(["t"])
        assert await asyncio.wait_for(anext(it), TIMEOUT) is KEEPALIVE


@pytest.mark.parametrize("when", ["before_read", "after_empty_read"])
async def test_no_lost_wakeup_commit_between_read_and_wait(
    store: EventStore, notifier: Notifier, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A commit+notify lands right after the follower's read came back empty, before it
    waits (or right before the read's snapshot). The follower must still see the row at
    once, not after the keep-alive (30 s here) or never."""
    await store.append([deltas("s", 0, 2)])
    original_read = store.read
    injected: list[int] = []

    async def racy_read(stream_id: str, after: int = -1, limit: int | None = None):
        if when == "before_read" and after == 1 and not injected:
            injected.append(after)
            await store.append([terminal("s", 2)])
            notifier.notify(["s"])
        rows = await original_read(stream_id, after, limit)
        if when == "after_empty_read" and not rows and not injected:
            # the follower's read saw nothing; before it gets to wait, a commit lands
            injected.append(after)
            await store.append([terminal("s", 2)])
            notifier.notify(["s"])
        return rows

    monkeypatch.setattr(store, "read", racy_read)
    start = time.monotonic()
    got = await asyncio.wait_for(collect(store, notifier, "s", keep_keepalives=True), TIMEOUT)
    assert injected == [1]
    assert [e.seq for e in got] == [0, 1, 2]  # type: ignore[union-attr]
    assert time.monotonic() - start < 5.0  # at once: not after the 30 s keep-alive


async def test_no_lost_wakeup_on_empty_stream_first_read(
    store: EventStore, notifier: Notifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The very first read finds an empty stream and the first commit lands right after it:
    the wake-up must have been registered before that first read."""
    original_read = store.read
    injected: list[int] = []

    async def racy_read(stream_id: str, after: int = -1, limit: int | None = None):
        rows = await original_read(stream_id, after, limit)
        if not rows and not injected:
            injected.append(after)
            await store.append([deltas("s", 0, 1), terminal("s", 1)])
            notifier.notify(["s"])
        return rows

    monkeypatch.setattr(store, "read", racy_read)
    got = await asyncio.wait_for(collect(store, notifier, "s", keep_keepalives=True), TIMEOUT)
    assert injected == [-1]
    assert [e.seq for e in got] == [0, 1]  # type: ignore[union-attr]


async def test_no_lost_wakeup_when_notify_races_the_wait_repeatedly(
    store: EventStore, notifier: Notifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every empty read is followed by a commit+notify before the wait: 50 times in a row."""
    original_read = store.read
    n = 50

    async def racy_read(stream_id: str, after: int = -1, limit: int | None = None):
        rows = await original_read(stream_id, after, limit)
        if not rows:
            nxt = after + 1
            if nxt < n:
                await store.append([terminal("s", nxt) if nxt == n - 1 else deltas("s", nxt, 1)])
                notifier.notify(["s"])
        return rows

    monkeypatch.setattr(store, "read", racy_read)
    got = await asyncio.wait_for(collect(store, notifier, "s", keep_keepalives=True), 3.0)
    assert [e.seq for e in got] == list(range(n))  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_stress_no_lost_wakeup_many_followers(
    store: EventStore, notifier: Notifier, seed: int
) -> None:
    """Producers append in small bursts with tiny random pauses through the group-commit
    Appender while many followers (some joining late, some resuming mid-stream) read live.
    Every follower must get every event exactly once, in order. Most followers have a 30 s
    keep-alive, so a lost wake-up shows as a hang (caught by the timeout), not as a delay.
    At random quiet points the producer waits for every follower to catch up: a wake-up lost
    there cannot be rescued by a later commit."""
    rng = random.Random(seed)
    n = 200
    streams = ["resp_a", "resp_b"]
    appender = Appender(store, notifier)
    appender.start()
    progress: dict[int, tuple[str, int]] = {}  # follower -> (stream, last seq seen)

    async def all_caught_up(stream_id: str, seq: int) -> None:
        deadline = time.monotonic() + 10.0  # room for a loaded machine, below the keep-alive
        while True:
            behind = {k: v[1] for k, v in progress.items() if v[0] == stream_id and v[1] < seq}
            if not behind:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"lost wake-up: followers {behind} never saw seq {seq}")
            await asyncio.sleep(0.001)

    async def producer(stream_id: str) -> None:
        seq = 0
        futures = []
        while seq < n:
            burst = min(rng.randint(1, 6), n - seq)
            events = [ev(stream=stream_id, seq=seq + i) for i in range(burst)]
            if seq + burst == n:
                events[-1] = ev("response.completed", stream=stream_id, seq=n - 1)
            futures.append(appender.submit(Append(stream_id, seq, events)))
            seq += burst
            r = rng.random()
            if r < 0.2 and seq < n:  # a quiet point: committed, then nothing for a while
                await futures[-1]
                await all_caught_up(stream_id, seq - 1)
            elif r < 0.3:
                await asyncio.sleep(0)
            elif r < 0.7:
                await asyncio.sleep(rng.uniform(0, 0.002))
            # else: no pause, the next burst joins the same queue
        for stored in await asyncio.gather(*futures):
            assert stored and all(e.stream_id == stream_id for e in stored)

    async def follower(
        stream_id: str, delay: float, after: int, keepalive: float = 30.0, page: int = 512
    ) -> tuple[int, list[int], bool]:
        await asyncio.sleep(delay)
        me = len(progress)
        progress[me] = (stream_id, after)
        seqs: list[int] = []
        datas_ok = True
        async with aclosing(
            follow(store, notifier, stream_id, after, is_terminal, keepalive, page=page)
        ) as it:
            async for item in it:  # KEEPALIVEs (short keep-alive followers) are ignored
                if item is KEEPALIVE:
                    continue
                seqs.append(item.seq)
                progress[me] = (stream_id, item.seq)
                datas_ok &= f'"seq":{item.seq}' in item.data and item.stream_id == stream_id
        return after, seqs, datas_ok

    followers = []
    for stream_id in streams:
        for _ in range(3):  # start before the producer
            followers.append(asyncio.create_task(follower(stream_id, 0, -1)))
        for _ in range(2):  # join late, from the start
            followers.append(asyncio.create_task(follower(stream_id, rng.uniform(0, 0.03), -1)))
        for _ in range(2):  # resume mid-stream
            followers.append(
                asyncio.create_task(
                    follower(stream_id, rng.uniform(0, 0.03), rng.randint(0, n - 2))
                )
            )
        # a short keep-alive (KEEPALIVEs interleave) and small pages
        followers.append(asyncio.create_task(follower(stream_id, 0, -1, keepalive=0.01)))
        followers.append(asyncio.create_task(follower(stream_id, 0.01, -1, page=7)))
    await asyncio.sleep(0)
    try:
        # Room for a loaded machine, yet below the 30 s keep-alive: a lost wake-up still shows.
        everything = asyncio.gather(*(producer(s) for s in streams), *followers)
        await asyncio.wait_for(everything, 20.0)
    finally:  # on failure, do not leave followers waiting behind
        for task in followers:
            task.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
        await appender.stop()

    for task in followers:
        after, seqs, datas_ok = task.result()
        assert seqs == list(range(after + 1, n))
        assert datas_ok
    for stream_id in streams:
        assert notifier.followers(stream_id) == 0
        assert [e.seq for e in await store.read(stream_id)] == list(range(n))
    # group commit actually coalesced under this load
    assert appender.commits < 2 * n


async def test_a_cancel_that_lands_with_a_wake_up_is_not_lost(
    store: EventStore, notifier: Notifier
) -> None:
    """A client that goes away cancels its reader; if the cancel lands in the same loop turn
    as a wake-up (one a token while a response runs), the reader must still stop (Python
    3.11's asyncio.wait_for returned the wake-up's result instead, and the stream ran on)."""
    await store.append([deltas("s", 0, 1)])
    for _ in range(20):
        reading = asyncio.Event()

        async def reader(reading: asyncio.Event = reading) -> None:
            async with aclosing(follow(store, notifier, "s", 0, is_terminal, 30.0)) as it:
                reading.set()
                async for _item in it:
                    pass

        task = asyncio.create_task(reader())
        await reading.wait()
        await wait_until(lambda: notifier.followers("s") == 1)
        await asyncio.sleep(0.001)  # the reader now waits for a wake-up
        notifier.notify(["s"])  # the wake-up and the cancel, in one turn
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, TIMEOUT)


async def test_pages_bring_what_a_read_found_together_and_end_at_the_terminal(
    store: EventStore, notifier: Notifier
) -> None:
    """A stream sends a page in one write: the rows committed together arrive as one page
    (here the catch-up), later commits as pages of their own, the last ending at the terminal
    event even when more rows follow it."""
    await store.append([deltas("s", 0, 3)])
    pages: list[list[int]] = []

    async def follower() -> None:
        async with aclosing(follow_pages(store, notifier, "s", -1, is_terminal, 30.0)) as it:
            async for page in it:
                assert page  # never empty; no keep-alive within 30 s
                pages.append([row.seq for row in page])

    task = asyncio.create_task(follower())
    await wait_until(lambda: pages == [[0, 1, 2]])
    await store.append([deltas("s", 3, 2)])
    notifier.notify(["s"])
    await wait_until(lambda: len(pages) == 2)
    await store.append([terminal("s", 5), deltas("s", 6, 1)])
    notifier.notify(["s"])
    await asyncio.wait_for(task, TIMEOUT)
    assert pages == [[0, 1, 2], [3, 4], [5]]


async def test_closing_a_page_follower_early_releases_the_subscription(
    store: EventStore, notifier: Notifier
) -> None:
    await store.append([deltas("s", 0, 3)])
    async with aclosing(follow_pages(store, notifier, "s", -1, is_terminal, 30.0)) as it:
        assert [row.seq for row in await anext(it) or []] == [0, 1, 2]
        assert notifier.followers("s") == 1
    assert notifier.followers("s") == 0


async def test_at_a_stop_a_page_follower_that_ends_there_ends_after_what_is_committed(
    store: EventStore, notifier: Notifier
) -> None:
    """A client's stream ends at the server's stop, after every committed row (a resume at
    the next start goes on from its last); followers inside the server keep following."""
    await store.append([deltas("s", 0, 2)])
    pages: list[list[int]] = []

    async def client() -> None:
        pages_ = follow_pages(store, notifier, "s", -1, is_terminal, 30.0, ends_at_stop=True)
        async with aclosing(pages_) as it:
            async for page in it:
                pages.append([row.seq for row in page or []])

    inside = asyncio.create_task(collect(store, notifier, "s"))
    task = asyncio.create_task(client())
    await wait_until(lambda: pages == [[0, 1]] and notifier.followers("s") == 2)
    await store.append([deltas("s", 2, 2)])  # committed; its wake-up comes with the stop
    notifier.stop()
    await asyncio.wait_for(task, TIMEOUT)
    assert pages == [[0, 1], [2, 3]]
    later = follow_pages(store, notifier, "s", 1, is_terminal, 30.0, ends_at_stop=True)
    async with aclosing(later) as it:  # one that begins after the stop: what is there, then end
        assert [[row.seq for row in page or []] async for page in it] == [[2, 3]]
    assert not inside.done() and notifier.followers("s") == 1
    await store.append([terminal("s", 4)])
    notifier.notify(["s"])
    assert [e.seq for e in await asyncio.wait_for(inside, TIMEOUT)] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]
