"""Where a prompt renders: on the prompter's thread, or on the event loop when it is small and
other requests are being taken in (omni.service.prompting)."""

from __future__ import annotations

import asyncio
import threading

from omni.service.intake import Intake
from omni.service.prompting import INLINE_BYTES, Prompter


def where(prompter: Prompter, nbytes: int | None, others: int) -> str:
    """The thread a render of `nbytes` ran on, with `others` requests being taken in."""
    intake = prompter.intake
    assert intake is not None

    async def main() -> str:
        tickets = [intake.request() for _ in range(others + 1)]  # this request and the others
        for ticket in tickets:
            ticket.__enter__()
        try:
            return await prompter.render(nbytes, lambda: threading.current_thread().name)
        finally:
            for ticket in tickets:
                ticket.__exit__(None, None, None)

    return asyncio.run(main())


def test_a_small_prompt_renders_on_the_loop_while_others_are_taken_in() -> None:
    prompter = Prompter(Intake())
    try:
        loop_thread = threading.current_thread().name
        assert where(prompter, 100, others=3) == loop_thread
        assert where(prompter, INLINE_BYTES, others=1) == loop_thread
    finally:
        prompter.close()


def test_alone_large_or_with_images_it_renders_on_the_thread() -> None:
    prompter = Prompter(Intake())
    try:
        assert where(prompter, 100, others=0).startswith("omni-prompt")  # alone
        assert where(prompter, INLINE_BYTES + 1, others=3).startswith("omni-prompt")
        assert where(prompter, None, others=3).startswith("omni-prompt")  # images, tools
        prompter.inline_bytes = 0
        assert where(prompter, 100, others=3).startswith("omni-prompt")
    finally:
        prompter.close()
