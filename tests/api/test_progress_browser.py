"""A long prefill's progress on its detail page, in real headless Chromium: while the engine
holds the prompt half fed, the page says how many of its tokens are in; once the answer comes,
the line goes and the time to first token stands. A request that waited for its model's load
shows that load as its own phase."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from omni.ports.jobs import Delta, Finished, Prefilled, Started
from tests.api._browser import WAIT_MS, chromium, watched_page
from tests.api._helpers import MODEL, wait_for
from tests.api.test_tool_calls_scripted import ScriptedEngine
from tests.server import running


class HeldPrefill(ScriptedEngine):
    """Each job is a third fed, then held until `release` is set, then answered."""

    def __init__(self, engine: Any) -> None:
        super().__init__(engine)
        self.release = threading.Event()

    def submit(self, job: Any) -> None:
        assert job.claim()
        self.prompts.append(list(job.prompt))
        total = len(job.prompt)
        job.outputs.put_nowait(Started())
        job.outputs.put_nowait(Prefilled(total // 3, total))

        async def answer() -> None:
            await asyncio.to_thread(self.release.wait, WAIT_MS / 1000)
            job.outputs.put_nowait(Delta("Done.", 11))
            job.outputs.put_nowait(Finished("stop", total, 1))

        self.answering = asyncio.get_running_loop().create_task(answer())


@pytest.fixture
def page() -> Iterator[Page]:
    with chromium() as browser, watched_page(browser, 1200, 800) as opened:
        yield opened


def test_a_held_prefill_shows_its_progress_then_its_answer(
    tiny_engine: Any, tmp_path: Path, page: Page
) -> None:
    engine = HeldPrefill(tiny_engine)
    db = tmp_path / "omni.db"
    with running(engine, db) as (srv, client):
        made = client.responses.create(
            model=MODEL, input="A long prompt. " * 50, background=True, max_output_tokens=4
        )

        def progress() -> list[str]:
            with sqlite3.connect(db) as conn:
                rows = conn.execute(
                    "SELECT data FROM events WHERE stream_id = ?", (f"{made.id}/progress",)
                ).fetchall()
            return [r[0] for r in rows]

        assert wait_for(lambda: len(progress()) == 1)
        page.goto(f"{srv.base_url}/inspect/{made.id}")
        shown = page.locator("#progress")
        expect(shown).to_be_visible()
        total = len(engine.prompts[0])
        expect(shown).to_have_text(
            f"prefill: {total // 3:,} of {total:,} prompt tokens ({100 * (total // 3) // total}%)"
        )
        page.screenshot(path=str(tmp_path / "progress.png"))
        engine.release.set()
        expect(page.locator("body")).to_have_attribute("data-state", "final")
        expect(shown).to_be_hidden()
        expect(page.locator("#timings")).to_contain_text("time to first token")
        expect(page.locator("#timings")).not_to_contain_text("model load")  # it was loaded
