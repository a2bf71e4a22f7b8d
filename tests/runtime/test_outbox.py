"""The engine's sends from a thread of their own: in order, all of them by close, and a server
that is gone is told as a Connection would (EOFError)."""

from __future__ import annotations

import multiprocessing

import pytest

from omni.runtime.outbox import Outbox
from omni.runtime.wire import Token


def test_outputs_arrive_in_order_and_close_sends_what_is_left() -> None:
    engine_end, server_end = multiprocessing.Pipe()
    outbox = Outbox(engine_end)
    for step in range(50):  # (what fits in the pipe: nobody reads until close)
        outbox.send([Token(job, step) for job in range(4)])
    outbox.close()
    got = [server_end.recv() for _ in range(50)]
    assert [[t.token for t in out] for out in got] == [[step] * 4 for step in range(50)]
    assert not server_end.poll(0.05)


def test_what_the_server_sends_is_received_beside_the_sends() -> None:
    engine_end, server_end = multiprocessing.Pipe()
    outbox = Outbox(engine_end)
    server_end.send("job")
    assert outbox.poll(5) and outbox.recv() == "job"
    outbox.send(["out"])
    outbox.close()
    assert server_end.recv() == ["out"]


def test_a_server_gone_is_an_eof_error() -> None:
    engine_end, server_end = multiprocessing.Pipe()
    outbox = Outbox(engine_end)
    server_end.close()
    with pytest.raises(EOFError):
        for _ in range(10_000):  # the thread's failed write is seen at a later send
            outbox.send([Token(0, 1)])
    outbox.close()
