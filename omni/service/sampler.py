"""What the log cannot tell of the past: the loaded models and their queues, sampled every few
seconds into a ring in memory, for the inspector's dashboard. It covers only since this server
started (and a day at most); /metrics gives the same figures at scrape time."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

EVERY_S = 5.0
KEEP_S = 86_400  # a day of samples: 17,280 of them


@dataclass(frozen=True, slots=True)
class Loaded:
    """One loaded model as a sample saw it."""

    model: str
    queued: int  # jobs waiting for it
    running: int  # jobs it works on


@dataclass(frozen=True, slots=True)
class Sample:
    at_ms: int
    models: tuple[Loaded, ...]


class Sampler:
    """`read` every `every_s` seconds into a ring of the last `keep_s` seconds' samples."""

    def __init__(
        self,
        read: Callable[[], tuple[Loaded, ...]],
        every_s: float = EVERY_S,
        keep_s: int = KEEP_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._read = read
        self._clock = clock
        self.every_s = every_s
        self.samples: deque[Sample] = deque(maxlen=max(1, int(keep_s / every_s)))
        self.started_ms = int(clock() * 1000)
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> Sample:
        """One sample now, kept in the ring."""
        taken = Sample(int(self._clock() * 1000), self._read())
        self.samples.append(taken)
        return taken

    def between(self, start_ms: int, end_ms: int) -> list[Sample]:
        """The kept samples taken in [start_ms, end_ms), oldest first."""
        return [s for s in self.samples if start_ms <= s.at_ms < end_ms]

    def series(
        self, start_ms: int, step_ms: int, buckets: int, model: str | None = None
    ) -> dict[str, list[int | None]]:
        """The most of each figure a bucket's samples saw (None: no sample in it), of
        `model` alone where one is given: jobs queued, jobs running, models loaded."""
        shown: dict[str, list[int | None]] = {
            name: [None] * buckets for name in ("queued", "running", "loaded_models")
        }
        for taken in self.between(start_ms, start_ms + step_ms * buckets):
            b = (taken.at_ms - start_ms) // step_ms
            models = [m for m in taken.models if model is None or m.model == model]
            figures = {
                "queued": sum(m.queued for m in models),
                "running": sum(m.running for m in models),
                "loaded_models": len(models),
            }
            for name, value in figures.items():
                shown[name][b] = max(value, shown[name][b] or 0)
        return shown

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="omni-sampler")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.every_s)
