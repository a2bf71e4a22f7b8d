"""The engine's ranks in lockstep: every rank of a sharded model runs the same scheduler, and
rank 0 alone reads the server's pipe. What it read (the messages, whether any came, and the
time it read them at) is shared with the others in one collective, so that each rank takes the
same decisions at the same points and makes the same model calls (a sharded model's layers
wait for each other's in every forward pass). The time is the scheduler's clock on every rank:
within one look at the pipe it stands still, which is all its decisions need."""

from __future__ import annotations

import pickle
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import mlx.core as mx
import numpy as np

FIRST = 512  # bytes of the first collective of a share: a look with a few messages fits
# While work runs, the ranks look at the pipe about this often, not at every step: a look is a
# collective, and on the model's stream it waits for the step queued before it (a step that
# takes longer than this looks every time). What the server sends waits that long at most.
LOOK_EVERY_S = 0.02
# Steps between two looks at most: steps that turn slow (a prompt's chunks after quick decode
# steps) before the next look are this many at worst.
MOST_SKIPPED = 8
# A wait for the server (an idle engine) is a look every IDLE_LOOK_S: the ranks other than 0
# sleep through most of each (SLEEPING) rather than wait in the collective, where MLX's ring
# keeps a core busy. What comes while they sleep waits that long at most.
IDLE_LOOK_S = 0.05
SLEEPING = 0.9


class Gone:
    """Shared by rank 0 when the server's pipe is gone: every rank stops."""


@dataclass(frozen=True, slots=True)
class _Look:
    at: float  # rank 0's clock as it looked
    messages: tuple[Any, ...]


def share(group: Any, value: Any, stream: Any = None) -> Any:
    """`value` as rank 0 has it, on every rank (the others pass anything): pickled, summed over
    the group where only rank 0's bytes are not zeros; in one collective of FIRST bytes (its
    length, then the start of the pickle), a second for any rest. On `stream`, the model's:
    collectives on two streams could pair up in another order on each rank."""
    lead = group.rank() == 0
    on = mx.cpu if stream is None else stream
    data = pickle.dumps(value) if lead else b""
    first = np.zeros(FIRST, dtype=np.uint8)
    if lead:
        head = len(data).to_bytes(8, "little") + data[: FIRST - 8]
        first[: len(head)] = np.frombuffer(head, dtype=np.uint8)
    got = np.array(_summed(first, group, on))
    n = int.from_bytes(got[:8].tobytes(), "little")
    body = got[8 : 8 + n].tobytes()
    if n > FIRST - 8:  # the rest, in a second collective
        rest = np.frombuffer(data[FIRST - 8 :], dtype=np.uint8) if lead else None
        zeros = np.zeros(n - (FIRST - 8), dtype=np.uint8)
        body += np.array(_summed(zeros if rest is None else rest, group, on)).tobytes()
    return value if lead else pickle.loads(body)


def _summed(data: np.ndarray[Any, Any], group: Any, stream: Any) -> Any:
    summed = mx.distributed.all_sum(mx.array(data), group=group, stream=stream)
    mx.eval(summed)
    return summed


class Lockstep:
    """The server's pipe as every rank's scheduler reads it (poll, recv, send), and its clock.
    `conn`: rank 0's end of the pipe (None on the others, whose sends go nowhere); `at`: rank
    0's clock as all the ranks last shared it."""

    def __init__(self, group: Any, conn: Connection | None, at: float) -> None:
        self.group, self.conn = group, conn
        self.stream: Any = None  # the model's, once it is loaded (share)
        self._read: deque[Any] = deque()
        self._fresh = False  # the last look brought messages (poll)
        self._at = at  # rank 0's clock, as it last shared it (at the start: the order's)
        self._skip = 0  # polls still to answer "nothing" without a look (LOOK_EVERY_S)
        self._skipped = 0  # polls answered so since the last look

    def clock(self) -> float:
        """Rank 0's time at its latest look at the pipe."""
        return self._at

    def poll(self, timeout: float | None = None) -> bool:
        """Whether a message is there. A poll that does not wait (one a step) looks at the
        pipe about every LOOK_EVERY_S by rank 0's clock, and answers "nothing" in between: on
        every rank alike (each counts the same polls, and knows the same clock), with no
        collective."""
        if not self._read:
            if self._fresh and timeout == 0:  # what came with the last look is all there is,
                self._fresh = False  # for now
                return False
            if self._skip and timeout == 0:
                self._skip -= 1
                self._skipped += 1
                return False
            self._wait(timeout)
        return bool(self._read)

    def recv(self) -> Any:
        if not self._read:
            self._wait(None)
        message = self._read.popleft()
        if isinstance(message, Gone):
            raise EOFError("the server's pipe is gone")
        return message

    def send(self, value: Any) -> None:
        if self.conn is not None:
            self.conn.send(value)

    def _wait(self, timeout: float | None) -> None:
        """Looks at the pipe until a message comes or `timeout` has passed by rank 0's clock
        (None: until a message comes), IDLE_LOOK_S apart at most: every rank takes the same
        looks, deciding by what they shared."""
        if timeout == 0:
            self._look(0)
            return
        until = None if timeout is None else self._at + timeout
        while True:
            left = IDLE_LOOK_S if until is None else min(IDLE_LOOK_S, until - self._at)
            self._look(max(0.0, left))
            if self._read or (until is not None and self._at >= until):
                return

    def _look(self, timeout: float) -> None:
        """One look at the pipe for every rank: rank 0 waits up to `timeout` for a message,
        takes all that came, and shares them with the time; the others sleep through most of
        that wait."""
        look = None
        if self.conn is None:
            time.sleep(timeout * SLEEPING)
        else:
            messages: list[Any] = []
            try:
                if self.conn.poll(timeout):
                    messages.append(self.conn.recv())
                    while self.conn.poll(0):
                        messages.append(self.conn.recv())
            except (EOFError, OSError):
                messages.append(Gone())
            look = _Look(time.perf_counter(), tuple(messages))
        shared: _Look = share(self.group, look, self.stream)
        self._skip = 0
        if timeout == 0 and not shared.messages:  # quick polls of the same work as before:
            # they came this far apart, so this many can go without a look
            apart = (shared.at - self._at) / (self._skipped + 1)
            if apart > 0:
                self._skip = max(0, min(MOST_SKIPPED, int(LOOK_EVERY_S / apart) - 1))
        self._skipped = 0
        self._at = shared.at
        self._read.extend(shared.messages)
        self._fresh = bool(shared.messages)
