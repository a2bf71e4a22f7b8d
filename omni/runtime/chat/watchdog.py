"""The scheduler's watchdog: a step far longer than usual is logged with what it was doing, once
it ends, and from a thread of its own while it still runs (MLX lets go of the interpreter while
it computes): a stall shows in the log while it happens, not only as clients' silence."""

from __future__ import annotations

import logging
import threading
from typing import Final

from omni.runtime.chat import batch_generator
from omni.runtime.chat.state import SchedulerState

log = logging.getLogger(__name__)

# A step that takes this many times the usual (and this long at least) is logged with what it
# was doing.
SLOW_STEP_FACTOR: Final = 20
SLOW_STEP_S: Final = 2.0
WATCH_EVERY_S: Final = 0.5  # how often the watchdog looks at the step in progress


class Watchdog:
    """Watches `state`'s steps: each one ended (watch), and the one in progress (run, in its
    own thread)."""

    def __init__(self, state: SchedulerState):
        self.state = state

    def watch(self, seconds: float) -> None:
        """Log a step far longer than usual, with what it did."""
        usual = self.state._usual_s
        if usual and seconds > max(SLOW_STEP_S, SLOW_STEP_FACTOR * usual):
            log.warning(
                "an engine step took %.1f s (usually %.3f s): %s", seconds, usual, self.did()
            )
        self.state._usual_s = seconds if not usual else 0.9 * usual + 0.1 * seconds

    def run(self, stop: threading.Event) -> None:
        """Log a step still running far longer than usual, once, with what it is doing: a
        stall shows in the log while it lasts."""
        warned = None
        while not stop.wait(WATCH_EVERY_S):
            began, usual = self.state._step_began, self.state._usual_s
            if began is None or not usual or began == warned:
                continue
            lasted = self.state.clock() - began
            if lasted > max(SLOW_STEP_S, SLOW_STEP_FACTOR * usual):
                warned = began
                log.warning(
                    "an engine step has run for %.1f s (usually %.3f s): %s",
                    *(lasted, usual, self.doing()),
                )

    def doing(self) -> str:
        """What the step in progress is doing, in words (read from the watchdog's thread: a
        snapshot, for the log)."""
        state, parts = self.state, []
        if feeding := state._feeding:
            parts.append(f"feeding a group of {feeding} prompts")
        if prefills := list(state.prefills):
            p = prefills[0]
            fed, total = len(p.slot.fed) - len(p.rest), len(p.slot.fed)
            parts.append(f"feeding job {p.id}'s prompt ({fed} of {total} tokens fed)")
        if (solo := state.solo) is not None:
            parts.append(f"decoding job {solo.slot.spec.id} alone")
        elif slots := len(state.slots):
            n = len(batch_generator.prefilling(state.batch))
            parts.append(f"decoding {slots} jobs in the batch ({n} prompts prefilling)")
        return "; ".join(parts) or "nothing"

    def did(self) -> str:
        """What the step just ended did, in words."""
        state, parts = self.state, []
        if state._chunked is not None:
            job, n, fed, total = state._chunked
            parts.append(f"a chunk of {n} tokens of job {job}'s prompt ({fed} of {total} fed)")
        if state.solo is not None:
            parts.append(f"decoding job {state.solo.slot.spec.id} alone")
        elif state.slots:
            n = len(batch_generator.prefilling(state.batch))
            parts.append(f"decoding {len(state.slots)} jobs in the batch ({n} prompts prefilling)")
        return "; ".join(parts) or "nothing"
