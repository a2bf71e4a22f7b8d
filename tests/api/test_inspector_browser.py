"""The web inspector end to end in real headless Chromium: a response generated while the
browser watches appears in the list, grows on its page (through the SSE stream, resumed
after a dropped connection), and ends with the API's text and every event of the log in
order; a keyed server asks for the key and shows it only its own; a chat completion's page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from openai import OpenAI
from playwright.sync_api import Page, Route, expect

from tests.api._browser import WAIT_MS, chromium, keyed_server, logged, paced, shown
from tests.api._helpers import GREEDY, MODEL, read_log, wait_for
from tests.server import ServerThread

KEY_A = "sk-alice-" + "a" * 24
KEY_B = "sk-bob-" + "b" * 24
DELTA = "response.output_text.delta"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    context = browser.new_context()  # its own sessionStorage: no key carried between tests
    context.set_default_timeout(WAIT_MS)
    expect.set_options(timeout=WAIT_MS)
    errors: list[str] = []
    context.on("weberror", lambda e: errors.append(str(e.error)))
    yield context.new_page()
    context.close()
    assert not errors, errors  # no script on any page threw


def public_rows(page: Page, stream_id: str) -> list[tuple[str, int, str]]:
    return [row for row in shown(page) if row[0] == stream_id]


def deltas(server: ServerThread, rid: str) -> int:
    return sum(e.type == DELTA for e in read_log(server, rid))


def test_a_response_appears_grows_and_ends_live(
    server: ServerThread, client: OpenAI, page: Page
) -> None:
    db = server.state.store.path
    page.goto(f"{server.base_url}/inspect")
    expect(page.locator("#live")).to_have_class(re.compile(r"\bon\b"), timeout=WAIT_MS)
    watch = page.context.new_page()
    streams: list[str] = []
    watch.on("request", lambda r: streams.append(r.url) if "stream=true" in r.url else None)
    with paced(server) as pace:
        made = client.responses.create(
            model=MODEL, background=True, max_output_tokens=200, **GREEDY
        )
        row = page.locator(f'tr[data-id="{made.id}"]')
        expect(row).to_be_visible(timeout=WAIT_MS)  # appeared without a reload
        expect(row.locator(".status")).to_have_text("in_progress", timeout=WAIT_MS)

        pace.allow(8)
        assert wait_for(lambda: deltas(server, made.id) == 8, timeout=60)
        cut: list[int] = []

        def drop_after_a_few(route: Route) -> None:
            """The first stream the page opens sends 3 events from the log and ends, as a
            dropped connection would: the page must come back after the last one."""
            after = int(parse_qs(urlparse(route.request.url).query)["starting_after"][0])
            pace.allow(3)
            assert wait_for(lambda: len(read_log(server, made.id)) > after + 3, timeout=60)
            rows = [e for e in read_log(server, made.id) if after < e.seq <= after + 3]
            cut.extend(e.seq for e in rows)
            body = "".join(f"event: {e.type}\ndata: {e.data}\nid: {e.seq}\n\n" for e in rows)
            route.fulfill(status=200, content_type="text/event-stream", body=body)

        watch.route(re.compile(r"/v1/responses/.*stream=true"), drop_after_a_few, times=1)
        watch.goto(f"{server.base_url}/inspect/{made.id}")
        expect(watch.locator("#kind")).to_have_text("response", timeout=WAIT_MS)
        expect(watch.locator("body")).to_have_attribute("data-live", "live", timeout=WAIT_MS)
        if len(streams) < 2:  # events reach Python only during Playwright's own calls
            watch.wait_for_event("request", lambda r: "stream=true" in r.url)
        resumed = parse_qs(urlparse(streams[1]).query)["starting_after"][0]
        assert len(cut) == 3 and int(resumed) == cut[-1]  # after the last event it saw

        # While it runs: the page's events are the log's first ones, none missing or twice.
        expect(watch.locator(f'#timeline tr[data-seq="{cut[-1]}"]')).to_have_count(1)
        before = public_rows(watch, made.id)
        assert before == logged(db, made.id)[: len(before)]
        text_before = watch.locator("#output-text").text_content()
        preview_before = row.locator(".preview").inner_text()
        pace.allow(24)
        last = logged(db, made.id)
        assert wait_for(lambda: deltas(server, made.id) == 8 + 3 + 24, timeout=60)
        last = logged(db, made.id)
        expect(watch.locator(f'#timeline tr[data-seq="{last[-1][1]}"]')).to_have_count(1)
        assert public_rows(watch, made.id) == last  # grew live, in order, still running
        assert len(watch.locator("#output-text").text_content()) > len(text_before)
        expect(watch.locator("#status .status")).to_have_text("in_progress")
        expect(row.locator(".status")).to_have_text("in_progress")
        expect(row.locator(".preview")).not_to_have_text(preview_before, timeout=WAIT_MS)

        pace.open()
        expect(watch.locator("body")).to_have_attribute("data-state", "final", timeout=WAIT_MS)

    final = client.responses.retrieve(made.id)
    assert final.status in ("completed", "incomplete")
    assert watch.locator("#output-text").text_content() == final.output_text
    expect(watch.locator("#status .status")).to_have_text(final.status)
    assert public_rows(watch, made.id) == logged(db, made.id)  # every event, in seq order
    for stream in {s for s, _, _ in shown(watch)}:  # and any other stream it shows, whole
        assert [r for r in shown(watch) if r[0] == stream] == logged(db, stream)
    assert watch.locator("#chart svg").get_attribute("data-points") == str(
        sum(t == DELTA for _, _, t in logged(db, made.id))
    )
    expect(row.locator(".status")).to_have_text(final.status, timeout=WAIT_MS)


def test_a_keyed_server_asks_for_the_key_and_shows_only_its_own(
    tiny_engine: Any, tmp_path: Any, page: Page
) -> None:
    srv = keyed_server(tiny_engine, tmp_path / "omni.db", {"alice": KEY_A, "bob": KEY_B})
    try:
        with OpenAI(base_url=f"{srv.base_url}/v1", api_key=KEY_A, max_retries=0) as alice:
            mine = alice.responses.create(model=MODEL, input="mine", max_output_tokens=6)
        with OpenAI(base_url=f"{srv.base_url}/v1", api_key=KEY_B, max_retries=0) as bob:
            theirs = bob.responses.create(model=MODEL, input="theirs", max_output_tokens=6)
        page.goto(f"{srv.base_url}/inspect")
        auth = page.locator("#auth")
        expect(auth).to_be_visible()
        expect(auth.locator(".auth-message")).to_contain_text("API key")
        auth.locator("input").fill("sk-wrong")
        auth.locator("button").click()
        expect(auth.locator(".auth-message")).to_have_text("Incorrect API key provided.")
        auth.locator("input").fill(KEY_A)
        auth.locator("button").click()
        expect(auth).to_be_hidden()
        expect(page.locator(f'tr[data-id="{mine.id}"]')).to_be_visible()
        expect(page.locator("#recent tbody tr")).to_have_count(1)  # bob's is not listed

        page.goto(f"{srv.base_url}/inspect/{mine.id}")  # the tab kept the key
        expect(page.locator("body")).to_have_attribute("data-state", "final")
        expect(auth).to_be_hidden()
        assert page.locator("#output-text").text_content() == mine.output_text
        page.goto(f"{srv.base_url}/inspect/{theirs.id}")
        expect(page.locator("body")).to_have_attribute("data-state", "missing")
        expect(page.locator("#error")).to_contain_text(theirs.id)
    finally:
        srv.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_chat_completions_page(
    server: ServerThread, client: OpenAI, page: Page, stream: bool
) -> None:
    messages: Any = [{"role": "user", "content": f"hello {stream}"}]
    # Stored, whatever the server's default (an unstored one leaves the log once read).
    if stream:
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=12, stream=True, store=True
            )
        )
        cid = chunks[0].id
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        done = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=12, store=True
        )
        cid, text = done.id, done.choices[0].message.content or ""
    page.goto(f"{server.base_url}/inspect")
    row = page.locator(f'tr[data-id="{cid}"]')
    expect(row).to_be_visible()
    row.locator("a").click()
    expect(page.locator("body")).to_have_attribute("data-state", "final")
    expect(page.locator("#kind")).to_have_text("chat.completion")
    assert page.locator("#output-text").text_content() == text
    db = server.state.store.path
    for stream_id in {s for s, _, _ in shown(page)}:
        assert [r for r in shown(page) if r[0] == stream_id] == logged(db, stream_id)
    assert cid in {s for s, _, _ in shown(page)}


def test_a_search_finds_one_response_and_the_url_keeps_the_view(
    server: ServerThread, client: OpenAI, page: Page, tmp_path: Any
) -> None:
    made = {
        bird: client.responses.create(model=MODEL, input=f"a {bird} flew by", max_output_tokens=24)
        for bird in ("albatross", "pelican", "cormorant")
    }
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{server.base_url}/inspect")
    rows = page.locator("#recent tbody tr")
    expect(page.locator(f'tr[data-id="{made["cormorant"].id}"]')).to_be_visible()
    # The list, whatever its ids and previews, fits the window: no sideways scroll.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    page.screenshot(path=str(tmp_path / "list.png"))

    page.locator('input[name="q"]').fill("PELICAN")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-id", made["pelican"].id)
    page.locator('select[name="kind"]').select_option("response")
    expect(page).to_have_url(re.compile(r"\?q=PELICAN&kind=response$"))
    page.screenshot(path=str(tmp_path / "search.png"))

    page.reload()  # the same view from its URL
    expect(page.locator('input[name="q"]')).to_have_value("PELICAN")
    expect(page.locator('select[name="kind"]')).to_have_value("response")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-id", made["pelican"].id)

    page.goto(f"{server.base_url}/inspect?q=pelican+albatross")
    expect(page.locator("#empty")).to_have_text("No match for these filters.")
    expect(page.locator("#empty")).to_be_visible()
    page.goto(f"{server.base_url}/inspect?q=flew&sort=oldest&kind=response")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-id") for i in range(3)] == [m.id for m in made.values()]
