"""The intake's count: a request leaves it when its job is handed to the engine, or when its
handler returns without one (refused, answered from the replay cache, failed)."""

from __future__ import annotations

import asyncio

import pytest

from omni.service.intake import Intake


def test_each_request_counts_until_its_job_is_handed() -> None:
    intake = Intake()
    handed: list[int] = []
    gate = asyncio.Event()

    async def request(makes_job: bool) -> None:
        with intake.request():
            await gate.wait()  # all three are taken in before any goes on
            if makes_job:
                await asyncio.sleep(0)
                handed.append(intake.handed())
                handed.append(intake.handed())  # a second hand-off changes nothing
                await asyncio.sleep(0.01)  # still in its handler, no longer counted

    async def main() -> None:
        tasks = [asyncio.create_task(request(i != 1)) for i in range(3)]
        await asyncio.sleep(0)
        assert intake.taking == 3
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    # The first hands its job on once the one without a job has left: one is still behind it.
    assert handed == [1, 1, 0, 0]
    assert intake.taking == 0


def test_a_request_that_fails_leaves_the_intake() -> None:
    intake = Intake()
    with pytest.raises(ValueError), intake.request():
        assert intake.taking == 1
        raise ValueError("refused")
    assert intake.taking == 0
    assert intake.handed() == 0  # outside any request: nothing to close
