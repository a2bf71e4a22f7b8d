"""The operator's view in real headless Chromium: an admin key's page lists two keys' traffic
with each row's owner and says whose view it is; the header's switch takes another key, whose
page then shows only its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from playwright.sync_api import Page, expect

from tests.api._browser import chromium, keyed_server, watched_page
from tests.api._helpers import MODEL

KEYS = {"alice": "sk-alice-" + "a" * 24, "bob": "sk-bob-" + "b" * 24, "ops": "sk-ops-" + "o" * 24}


@pytest.fixture
def page() -> Iterator[Page]:
    with chromium() as browser, watched_page(browser, 1400, 700, console=False) as opened:
        yield opened


def sign_in(page: Page, key: str) -> None:
    auth = page.locator("#auth")
    expect(auth).to_be_visible()
    auth.locator("input").fill(key)
    auth.locator("button").click()
    expect(auth).to_be_hidden()


def test_an_admin_sees_both_keys_traffic_and_can_switch_key(
    tiny_engine: Any, tmp_path: Path, page: Page
) -> None:
    srv = keyed_server(tiny_engine, tmp_path / "omni.db", KEYS, admins=("ops",))
    try:
        made = {}
        for name in ("alice", "bob"):
            with OpenAI(base_url=f"{srv.base_url}/v1", api_key=KEYS[name], max_retries=0) as c:
                made[name] = c.responses.create(model=MODEL, input=f"{name}'s", max_output_tokens=4)
        page.goto(f"{srv.base_url}/inspect")
        sign_in(page, KEYS["ops"])
        expect(page.locator("header .whoami")).to_have_text("key: ops (admin: every key's rows)")
        for name, response in made.items():
            row = page.locator(f'tr[data-id="{response.id}"]')
            expect(row).to_be_visible()
            expect(row).to_contain_text(name)  # its owner
        page.screenshot(path=str(tmp_path / "admin.png"))

        page.locator("header .key-switch").click()
        sign_in(page, KEYS["bob"])
        expect(page.locator("header .whoami")).to_have_text("key: bob")
        expect(page.locator(f'tr[data-id="{made["bob"].id}"]')).to_be_visible()
        expect(page.locator("#recent tbody tr")).to_have_count(1)  # alice's is not bob's
    finally:
        srv.stop()
