"""What the engine's scheduler tells an observer about its steps: nothing is kept by default;
benchmarks attach StepStats (the engine's settings: stats, trace) to see where the engine
process's time goes and when jobs came and went."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

PREFILL_BUCKETS_MS: Final = (5, 20, 100)  # prefill steps counted by time
# A row of the step trace: when the step ended (perf_counter), its seconds, jobs received
# before it, jobs still waiting after it, jobs decoding, prompt tokens it prefilled and the
# seconds they took.
TRACE_FIELDS: Final = (
    "t",
    "step_s",
    "arrived",
    "waiting",
    "running",
    "prefill_tokens",
    "prefill_s",
)


class Observer:
    """Told of each step of the scheduler's loop, in order: woken (by the pipe or by work to
    do), jobs admitted, prompts prefilled, the step, its outputs sent. Keeps nothing."""

    # Whether each decode step's prefill (BatchGenerator's) is measured for on_prefill.
    times_prefill = False

    @contextmanager
    def serving(self, batch: Any) -> Iterator[None]:
        """Around the whole run of `batch` (mlx-lm's BatchGenerator)."""
        yield

    def on_wake(self, idle_s: float, arrived: int) -> None:
        """The loop woke after `idle_s`; `arrived`: jobs received since the last step."""

    def on_admit(self, seconds: float, grouped: bool) -> None:
        """Jobs were admitted in `seconds`; `grouped`: some were handed to the batch."""

    def on_prefill(self, seconds: float, tokens: int, chunk: bool) -> None:
        """Prompt tokens were fed: a long prompt's chunk, or a decode step's prefill."""

    def on_step(self, end: float, seconds: float, arrived: int, waiting: int, running: int) -> None:
        """A step ended at `end` (perf_counter) after `seconds`, with `running` jobs decoding
        and `waiting` still queued."""

    def on_sent(self, outputs: int, seconds: float) -> None:
        """The step's `outputs` went to the server in one message (0: nothing to send)."""

    def close(self) -> None:
        """The engine is done: report what was kept."""


class StepStats(Observer):
    """Where the engine process's time goes (printed as "omni engine stats: {...}" on stderr
    at exit when `report`), and one row per step written to `trace` (TRACE_FIELDS)."""

    def __init__(self, time_prefill: bool = False, trace: str | None = None, report: bool = False):
        self.times_prefill = time_prefill or trace is not None
        self.stats: defaultdict[str, float] = defaultdict(float)
        self.trace_path = trace
        self.trace: list[tuple[float, ...]] = []
        self.report = report
        self._step_prefill = (0.0, 0)  # the step's prefill so far: seconds, tokens

    @contextmanager
    def serving(self, batch: Any) -> Iterator[None]:
        inside = None
        try:
            with batch.stats() as inside:  # BatchGenerator's own split: prefill, decode
                yield
        finally:
            if inside is not None:
                stats = self.stats
                stats["bg_prompt_s"] += inside.prompt_time
                stats["bg_prompt_tokens"] += inside.prompt_tokens
                stats["bg_decode_s"] += inside.decode_time
                stats["bg_decode_steps"] += inside.generation_steps
                stats["peak_memory_gb"] = inside.peak_memory

    def on_wake(self, idle_s: float, arrived: int) -> None:
        self.stats["idle_s"] += idle_s
        self.stats["jobs"] += arrived

    def on_admit(self, seconds: float, grouped: bool) -> None:
        self.stats["admit_s"] += seconds
        if grouped:
            self.stats["admit_groups"] += 1

    def on_prefill(self, seconds: float, tokens: int, chunk: bool) -> None:
        if chunk:
            self.stats["chunk_prefill_s"] += seconds
            self.stats["chunk_prefill_tokens"] += tokens
        if self.times_prefill:
            self._count_prefill(seconds, tokens)
            s, t = self._step_prefill
            self._step_prefill = (s + seconds, t + tokens)

    def on_step(self, end: float, seconds: float, arrived: int, waiting: int, running: int) -> None:
        stats = self.stats
        stats["step_s"] += seconds
        stats["steps"] += 1
        stats["batch_tokens"] += running
        if self.trace_path is not None:
            prefill_s, prefill_tokens = self._step_prefill
            self.trace.append((end, seconds, arrived, waiting, running, prefill_tokens, prefill_s))
        self._step_prefill = (0.0, 0)

    def on_sent(self, outputs: int, seconds: float) -> None:
        self.stats["send_s"] += seconds
        if outputs:
            self.stats["messages"] += 1
            self.stats["outputs"] += outputs

    def close(self) -> None:
        if self.report:
            stats = {k: round(v, 3) for k, v in sorted(self.stats.items())}
            print(f"omni engine stats: {stats}", file=sys.stderr, flush=True)
        if self.trace_path is not None:
            write_trace(self.trace_path, self.trace)

    def _count_prefill(self, seconds: float, tokens: int) -> None:
        """How the steps that prefilled spread by time: a few slow ones among many quick ones
        point at per-shape work (kernels built for a new shape), all slow at the work itself."""
        if tokens == 0:
            return
        stats = self.stats
        stats["prefill_steps"] += 1
        stats["prefill_max_s"] = max(stats["prefill_max_s"], seconds)
        for bound in PREFILL_BUCKETS_MS:
            if seconds * 1000 < bound:
                stats[f"prefill_steps_under_{bound}ms"] += 1
                return
        stats["prefill_slow_steps"] += 1
        stats["prefill_slow_s"] += seconds
        stats["prefill_slow_tokens"] += tokens


def write_trace(path: str, rows: list[tuple[float, ...]]) -> None:
    """A step trace as JSON: its fields (TRACE_FIELDS) and its rows."""
    with open(path, "w") as f:
        json.dump({"fields": TRACE_FIELDS, "rows": rows}, f)


QUIET: Final = Observer()  # the scheduler's unless a benchmark attaches one
