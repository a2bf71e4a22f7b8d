"""Notifier: per-stream wake-ups without data."""

from __future__ import annotations

import asyncio

from omni.events import Notifier


async def test_notify_sets_only_the_right_streams_waiters(notifier: Notifier) -> None:
    with (
        notifier.subscribe("a") as a1,
        notifier.subscribe("a") as a2,
        notifier.subscribe("b") as b1,
        notifier.subscribe("a/request") as a_req,
    ):
        assert not any(w.is_set() for w in (a1, a2, b1, a_req))
        notifier.notify(["a"])
        assert a1.is_set() and a2.is_set()
        assert not b1.is_set()
        assert not a_req.is_set()  # a different stream, despite the prefix

        a1.clear()
        a2.clear()
        notifier.notify(["b", "b", "zzz"])  # duplicates and unknown streams are harmless
        assert b1.is_set()
        assert not a1.is_set() and not a2.is_set() and not a_req.is_set()

        notifier.notify(iter(["a/request", "a"]))  # any iterable, e.g. a generator
        assert a_req.is_set() and a1.is_set() and a2.is_set()


async def test_notify_wakes_a_waiting_task(notifier: Notifier) -> None:
    with notifier.subscribe("s") as wake:
        waiter = asyncio.create_task(wake.wait())
        await asyncio.sleep(0)
        assert not waiter.done()
        notifier.notify(["s"])
        await asyncio.wait_for(waiter, 1)


async def test_unsubscribed_event_is_no_longer_set(notifier: Notifier) -> None:
    with notifier.subscribe("s") as wake:
        pass
    notifier.notify(["s"])
    assert not wake.is_set()


async def test_followers_counts(notifier: Notifier) -> None:
    assert notifier.followers("s") == 0
    with notifier.subscribe("s"):
        assert notifier.followers("s") == 1
        with notifier.subscribe("s"), notifier.subscribe("t"):
            assert notifier.followers("s") == 2
            assert notifier.followers("t") == 1
        assert notifier.followers("s") == 1
        assert notifier.followers("t") == 0
    assert notifier.followers("s") == 0
    assert notifier._waiters == {}  # no empty entries left behind


async def test_subscription_is_released_on_exception(notifier: Notifier) -> None:
    try:
        with notifier.subscribe("s"):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert notifier.followers("s") == 0


async def test_wait_idle_returns_immediately_when_nobody_follows(notifier: Notifier) -> None:
    await asyncio.wait_for(notifier.wait_idle("s"), 0.5)
    with notifier.subscribe("other"):
        await asyncio.wait_for(notifier.wait_idle("s"), 0.5)


async def test_wait_idle_returns_once_the_last_subscriber_leaves(notifier: Notifier) -> None:
    first = notifier.subscribe("s")
    second = notifier.subscribe("s")
    first.__enter__()
    second.__enter__()
    idle = asyncio.create_task(notifier.wait_idle("s"))
    idle2 = asyncio.create_task(notifier.wait_idle("s"))  # several waiters share the wait
    await asyncio.sleep(0.01)
    assert not idle.done()

    first.__exit__(None, None, None)
    await asyncio.sleep(0.01)
    assert not idle.done()  # one follower is still there

    second.__exit__(None, None, None)
    await asyncio.wait_for(asyncio.gather(idle, idle2), 1)

    # the next wait_idle cycle works again from scratch
    with notifier.subscribe("s"):
        again = asyncio.create_task(notifier.wait_idle("s"))
        await asyncio.sleep(0.01)
        assert not again.done()
    await asyncio.wait_for(again, 1)
