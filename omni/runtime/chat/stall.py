"""A sharded model's ranks timed from the server's side: a stopped rank, or a dropped link,
leaves the others waiting in a collective that never completes, and nothing comes back. The
reader of the engine's pipe waits for its outputs here, and takes the ranks for stalled once
work has run that long with nothing read (omni.runtime.chat.engine then stops them, as if one
had died). An engine process of its own is not timed: its steps' lengths are the model's."""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.connection import Connection

LOOK_S = 0.5  # how often the wait looks whether work is running


def stalled(conn: Connection, timeout_s: float, working: Callable[[], bool]) -> bool:
    """Wait until `conn` has something to read (False), or until `working()` has held for
    `timeout_s` with nothing read (True)."""
    waited = 0.0
    while not conn.poll(LOOK_S):
        waited = waited + LOOK_S if working() else 0.0
        if waited >= timeout_s:
            return True
    return False
