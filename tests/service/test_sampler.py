"""The dashboard's samples of the loaded models and their queues: a ring of the last day's,
bucketed as the log's rows are, of one model or all; taken from the start until closed."""

from __future__ import annotations

import asyncio

from omni.service.sampler import Loaded, Sampler


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_buckets_keep_the_most_each_saw() -> None:
    clock = Clock()
    seen = [
        (Loaded("a", 2, 1),),
        (Loaded("a", 5, 1), Loaded("b", 1, 0)),
        (Loaded("b", 0, 2),),
    ]
    reads = iter(seen)
    sampler = Sampler(lambda: next(reads), every_s=5, clock=clock)
    for _ in seen:
        sampler.sample()
        clock.now += 5  # samples at 1000, 1005, 1010 s
    start = 1_000_000
    every = sampler.series(start, 10_000, 3)  # buckets [1000, 1010), [1010, 1020), [1020, …)
    assert every == {
        "queued": [6, 0, None],
        "running": [1, 2, None],
        "loaded_models": [2, 1, None],  # none sampled in the last: no figure, not 0
    }
    assert sampler.series(start, 10_000, 3, model="b")["queued"] == [1, 0, None]
    assert sampler.series(start - 10_000, 10_000, 1)["queued"] == [None]  # before it started


def test_the_ring_keeps_the_last_day() -> None:
    clock = Clock()
    sampler = Sampler(lambda: (), every_s=5, keep_s=20, clock=clock)
    for _ in range(10):
        sampler.sample()
        clock.now += 5
    assert [s.at_ms for s in sampler.samples] == [1_030_000, 1_035_000, 1_040_000, 1_045_000]


async def test_it_samples_from_the_start_until_closed() -> None:
    taken = asyncio.Event()

    def read() -> tuple[Loaded, ...]:
        taken.set()
        return (Loaded("a", 0, 0),)

    sampler = Sampler(read, every_s=3600)
    sampler.start()
    await taken.wait()
    await sampler.close()
    assert len(sampler.samples) == 1 and sampler.samples[0].models[0].model == "a"
