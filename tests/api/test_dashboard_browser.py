"""The dashboard in real headless Chromium, on a live server under load: while the page is
open, long generations run (the server's samples see them) and a few requests come at once
(the log's buckets count them); the page redraws on its own until every chart shows them,
with no script error and nothing the page's policy refused. Its screenshot is kept."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from playwright.sync_api import Page, expect

from tests.api._browser import chromium, watched_page
from tests.api._helpers import MODEL, UNENDING
from tests.server import ServerThread

CHARTS = ["requests", "tokens", "ttft", "decode", "queue", "loaded"]


@pytest.fixture
def page() -> Iterator[Page]:
    with chromium() as browser, watched_page(browser, 1280, 900) as opened:
        yield opened


def shows_points(page: Page, chart: str) -> None:
    expect(page.locator(f"#chart-{chart}")).not_to_have_attribute("data-nonzero", "0")
    expect(page.locator(f"#chart-{chart} canvas")).to_have_count(1)


def endless(client: OpenAI, n: int) -> Any:
    """A background run that goes on until it is cancelled."""
    return client.responses.create(
        model=MODEL, input=f"long {n}", max_output_tokens=5000, background=True,
        extra_body=UNENDING,
    )  # fmt: skip


def test_the_dashboard_draws_a_loaded_server_live(
    server: ServerThread, client: OpenAI, page: Page, tmp_path: Path
) -> None:
    page.goto(f"{server.base_url}/inspect/dashboard")
    expect(page.locator("body")).to_have_attribute("data-state", "drawn")
    expect(page.locator("#live")).to_have_class("live on")
    long = [endless(client, n) for n in range(3)]
    try:
        shows_points(page, "queue")  # the runs were sampled, and the page polled since
    finally:
        for made in long:
            client.responses.cancel(made.id)

    def ask(n: int) -> Any:
        return client.responses.create(model=MODEL, input=f"short {n}", max_output_tokens=8)

    with ThreadPoolExecutor(4) as pool:
        assert all(r.usage.output_tokens > 0 for r in pool.map(ask, range(4)))
    for chart in CHARTS:
        shows_points(page, chart)
    expect(page.locator("#loaded-now")).to_contain_text(MODEL)
    expect(page.locator("#owner-filter")).to_be_hidden()  # no keys: no owner to choose
    page.select_option("select[name=model]", MODEL)  # the filter offers the model served
    expect(page.locator("select[name=model]")).to_have_value(MODEL)
    shows_points(page, "requests")
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    page.select_option("select[name=window]", "24h")  # a wider window: coarser buckets
    expect(page.locator("#step")).to_have_text("15 min")
    shows_points(page, "requests")
