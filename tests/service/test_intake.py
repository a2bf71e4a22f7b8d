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


def test_a_handed_run_settles_once_the_others_are_in() -> None:
    intake = Intake(settle_s=30)
    order: list[str] = []
    gate = asyncio.Event()

    async def request(name: str, first: bool) -> None:
        with intake.request():
            if first:
                await asyncio.sleep(0)  # the others are taken in too
                assert intake.taking == 3
            else:
                await gate.wait()  # still being taken in while the first has left
            intake.handed()
            order.append(f"{name} handed")
            if first:
                gate.set()
            await intake.settled()
            order.append(f"{name} settled")

    async def main() -> None:
        await asyncio.gather(request("a", True), request("b", False), request("c", False))

    asyncio.run(main())
    # The first waits for the two behind it; the last, with nobody behind, goes on at once.
    assert order.index("a settled") > order.index("c handed")
    assert order.index("a settled") > order.index("b handed")
    assert intake.taking == 0


def test_settling_waits_no_longer_than_its_limit() -> None:
    intake = Intake(settle_s=0.05)
    order: list[str] = []

    async def slow() -> None:
        with intake.request():  # a body that never finishes arriving (within the test)
            await asyncio.sleep(5)

    async def main() -> None:
        stuck = asyncio.create_task(slow())
        await asyncio.sleep(0)
        with intake.request():
            intake.handed()
            await intake.settled()
            order.append("settled")
        assert intake.taking == 1  # it went on without the one still coming
        stuck.cancel()

    asyncio.run(main())
    assert order == ["settled"]
    assert intake.taking == 0


def test_alone_it_settles_at_once() -> None:
    intake = Intake(settle_s=30)

    async def main() -> None:
        with intake.request():
            intake.handed()
            await asyncio.wait_for(intake.settled(), 1)

    asyncio.run(main())
