"""The web inspector's screenshots in the README (docs/inspect-list.png, docs/inspect-response.png).

Against a server on a fresh database (the list shows what is in it), in headless Chromium:
    .venv/bin/omni serve --db /tmp/shots.db &
    .venv/bin/python examples/inspector_screenshots.py [OUT_DIR, default docs/]
Needs Playwright (the `test` extra) and Debian's `chromium` (or OMNI_TEST_CHROMIUM=path).
"""

import os
import sys
from pathlib import Path

from _client import BASE_URL, MODEL, client
from playwright.sync_api import expect, sync_playwright

CHROMIUM = os.environ.get("OMNI_TEST_CHROMIUM", "/usr/bin/chromium")
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "docs")
SITE = BASE_URL.removesuffix("/").removesuffix("/v1")

# 1. Some finished work: two responses and a stored chat completion.
client.responses.create(model=MODEL, input="What is the capital of France?")
client.responses.create(
    model=MODEL, instructions="Answer in one sentence.", input="Why is the sky blue?"
)
client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "Name three colours."}], store=True
)
# 2. One still running while the list is taken.
story = client.responses.create(
    model=MODEL,
    input="Write a short story about a lighthouse keeper and a storm.",
    background=True,
    max_output_tokens=400,
)

OUT.mkdir(parents=True, exist_ok=True)
with sync_playwright() as p:
    browser = p.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-background-networking"]
    )
    page = browser.new_page(viewport={"width": 1440, "height": 400}, device_scale_factor=1)
    expect.set_options(timeout=120_000)
    page.goto(f"{SITE}/inspect")
    row = page.locator(f'tr[data-id="{story.id}"]')
    expect(row.locator(".status")).to_have_text("in_progress")
    expect(row.locator(".preview")).not_to_have_text("")
    page.screenshot(path=OUT / "inspect-list.png")

    page.set_viewport_size({"width": 1280, "height": 1100})
    page.goto(f"{SITE}/inspect/{story.id}")
    expect(page.locator("body")).to_have_attribute("data-state", "final")
    page.screenshot(path=OUT / "inspect-response.png")
    browser.close()
print(f"wrote {OUT / 'inspect-list.png'} and {OUT / 'inspect-response.png'}")
