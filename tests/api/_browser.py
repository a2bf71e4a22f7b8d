"""Real headless Chromium (Debian's `chromium`, driven by Playwright) for the inspector's
tests, and a pace on generation so a test can watch a response while it runs."""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omni.api.app import Settings
from omni.api.gate import Access
from omni.api.keys import KeyRing, api_key
from omni.ports.jobs import Delta, Job
from tests.server import ServerThread

# Debian's package (.ci/run installs it); elsewhere (macOS) point OMNI_TEST_CHROMIUM at one.
CHROMIUM = os.environ.get("OMNI_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-background-networking"]
WAIT_MS = 60_000  # a loaded 2-core machine: conditions, never durations, decide


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def watched_page(
    browser: Any, width: int = 1280, height: int = 900, console: bool = True
) -> Iterator[Any]:
    """A page in a context of its own (its own sessionStorage: no key carried over) that waits
    up to WAIT_MS for each expectation; on leaving, no script may have thrown and (`console`)
    the console may hold no error (a refusal by the page's policy is one; so is a 401 a keyed
    server answers before the page has its key)."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(WAIT_MS)
    expect.set_options(timeout=WAIT_MS)
    problems: list[str] = []
    context.on("weberror", lambda e: problems.append(str(e.error)))
    page = context.new_page()
    if console:
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    try:
        yield page
    finally:
        context.close()
    assert not problems, problems


class Pace:
    """Tokens reach the recorder only as the test allows them: a response stays in progress,
    part written, for as long as the test looks at it (the engine itself runs at speed; what
    it made waits, in order, in front of the recorder). `allow(n)`: n more tokens with text,
    so n more output_text.delta events (tokens without text pass freely)."""

    def __init__(self, server: Any):
        self.server = server
        self.budget: float = 0
        self.queues: list[_Gated] = []

    def allow(self, tokens: float) -> None:
        self.server.call(self._allow(tokens))

    def open(self) -> None:
        self.allow(math.inf)

    async def _allow(self, tokens: float) -> None:
        self.budget += tokens
        for queue in self.queues:
            queue.flush()


class _Gated(asyncio.Queue[Any]):
    def __init__(self, pace: Pace):
        super().__init__()
        self.pace = pace
        self.held: deque[Any] = deque()

    def put_nowait(self, item: Any) -> None:
        self.held.append(item)
        self.flush()

    def flush(self) -> None:
        while self.held and (not _counted(self.held[0]) or self.pace.budget >= 1):
            item = self.held.popleft()
            if _counted(item):
                self.pace.budget -= 1
            super().put_nowait(item)


def _counted(item: Any) -> bool:
    """A token with text: one output_text.delta event (half a character makes none)."""
    return isinstance(item, Delta) and item.text != ""


@contextmanager
def paced(server: Any) -> Iterator[Pace]:
    """Jobs submitted in the block deliver their tokens as `pace.allow(n)` lets them (all of
    them once the block ends)."""
    pace = Pace(server)
    engine = server.state.engine
    submit = engine.submit

    def gated(job: Job) -> None:
        job.outputs = _Gated(pace)
        pace.queues.append(job.outputs)
        submit(job)

    engine.submit = gated  # the instance's, over the class's
    try:
        yield pace
    finally:
        vars(engine).pop("submit", None)
        pace.open()


def keyed_server(
    engine: Any, db: Path, keys: dict[str, str], admins: tuple[str, ...] = ()
) -> ServerThread:
    """A server that takes only these keys ({name: key}); `admins` name those that see every
    key's rows in the inspector."""
    ring = KeyRing([api_key(key, name, name in admins) for name, key in keys.items()])
    settings = Settings(db_path=str(db), keepalive=1.0, access=Access(keys=ring))
    return ServerThread(settings, engine).start()


def logged(db: Path | str, stream_id: str) -> list[tuple[str, int, str]]:
    """(stream_id, seq, type) of a stream, as the events table holds it, in seq order."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT stream_id, seq, type FROM events WHERE stream_id = ? ORDER BY seq",
            (stream_id,),
        ).fetchall()
    return [(str(s), int(q), str(t)) for s, q, t in rows]


def shown(page: Any) -> list[tuple[str, int, str]]:
    """(stream_id, seq, type) of each timeline row the page shows, top to bottom."""
    rows = page.eval_on_selector_all(
        "#timeline tbody tr",
        "trs => trs.map(tr => [tr.dataset.stream, Number(tr.dataset.seq), tr.dataset.type])",
    )
    return [(str(s), int(q), str(t)) for s, q, t in rows]
