"""The ranks' look at the server's pipe (omni.runtime.chat.lockstep), on a group of one rank:
what rank 0 read reaches the scheduler in order; while work runs, a poll that does not wait
looks at the pipe about every LOOK_EVERY_S by rank 0's clock, not at every step, and a poll
that waits always looks (the ranks' lockstep itself: tests/test_ranks.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from multiprocessing import Pipe
from typing import Any

import mlx.core as mx
import pytest

from omni.runtime.chat import lockstep
from omni.runtime.chat.lockstep import LOOK_EVERY_S, MOST_SKIPPED, Lockstep, share


@pytest.fixture
def pipe() -> Iterator[tuple[Lockstep, Any]]:
    ours, theirs = Pipe()
    yield Lockstep(mx.distributed.init(), ours, 0.0), theirs
    ours.close()
    theirs.close()


def ticking(monkeypatch: pytest.MonkeyPatch, step_s: float) -> None:
    """Rank 0's clock moves `step_s` at each reading (a look reads it once)."""
    ticks = itertools.count(1)
    monkeypatch.setattr(lockstep.time, "perf_counter", lambda: next(ticks) * step_s)


def polls_until_seen(steps: Lockstep) -> int:
    for n in range(1, 1000):
        if steps.poll(0):
            return n
    raise AssertionError("never seen")


def test_messages_come_in_order_and_a_long_one_whole(pipe: tuple[Lockstep, Any]) -> None:
    steps, server = pipe
    big = "x" * 5000  # more than the first collective's bytes
    for message in ("a", big, ("c", 3)):
        server.send(message)
    assert steps.poll(1.0)
    assert [steps.recv(), steps.recv(), steps.recv()] == ["a", big, ("c", 3)]
    assert share(steps.group, {"k": [1, 2]}) == {"k": [1, 2]}
    server.close()
    with pytest.raises(EOFError):  # the server gone: every rank learns it
        steps.recv()


def test_quick_steps_look_at_the_pipe_every_so_often(
    pipe: tuple[Lockstep, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    steps, server = pipe
    step_s = LOOK_EVERY_S / 10  # each look reads the clock once: steps this far apart
    ticking(monkeypatch, step_s)
    for _ in range(3):  # the looks learn how far apart the steps are
        steps.poll(0)
    server.send("job")
    seen = polls_until_seen(steps)
    assert 1 < seen <= round(LOOK_EVERY_S / step_s)  # not at once, but within LOOK_EVERY_S
    assert steps.recv() == "job"
    server.send("cancel")
    assert steps.poll(None)  # a poll that waits looks at once


def test_slow_steps_look_every_time(
    pipe: tuple[Lockstep, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    steps, server = pipe
    ticking(monkeypatch, 2 * LOOK_EVERY_S)
    for _ in range(3):
        steps.poll(0)
    server.send("job")
    assert polls_until_seen(steps) == 1


def test_the_skipped_steps_are_bounded(
    pipe: tuple[Lockstep, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    steps, server = pipe
    ticking(monkeypatch, LOOK_EVERY_S / 10_000)
    for _ in range(3):
        steps.poll(0)
    server.send("job")
    assert polls_until_seen(steps) <= MOST_SKIPPED + 1
