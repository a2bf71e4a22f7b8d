"""The web inspector end to end in real headless Chromium: a response generated while the
browser watches appears in the list, grows on its page (through the SSE stream, resumed
after a dropped connection), and ends with the API's text and every event of the log in
order; a keyed server asks for the key and shows it only its own; a chat completion's page;
a four-turn chain with a tool call, every turn whole and linked; an unknown id; an embedding."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from openai import OpenAI
from playwright.sync_api import Page, Route, expect

from tests.api._browser import WAIT_MS, chromium, keyed_server, logged, paced, shown
from tests.api._helpers import GREEDY, MODEL, read_log, wait_for
from tests.api.test_tool_calls_scripted import ScriptedEngine
from tests.inspect._chain import LONG, make_chain
from tests.server import ServerThread, running

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


def test_a_chains_page_shows_every_turn_whole_and_linked(
    tiny_engine: Any, tmp_path: Path, page: Page
) -> None:
    engine = ScriptedEngine(tiny_engine)
    with running(engine, tmp_path / "omni.db") as (srv, client):
        chain = make_chain(engine, client)
        ids = chain.ids
        page.set_viewport_size({"width": 1200, "height": 900})
        page.goto(f"{srv.base_url}/inspect/{ids[1]}")
        expect(page.locator("body")).to_have_attribute("data-state", "final")
        turns = page.locator("#turns li.turn")
        expect(turns).to_have_count(4)
        assert [turns.nth(i).get_attribute("data-turn") for i in range(4)] == ids
        expect(page.locator("#turns li.turn.current")).to_have_attribute("data-turn", ids[1])
        expect(page.locator("#turn-of")).to_have_text("turn 2 of 4")
        # The tool call, and its result in the next turn's input, both here and in the turns.
        call = turns.nth(0).locator(".call")
        expect(call.locator(".name")).to_have_text("get_weather")
        assert json.loads(call.locator("pre").inner_text()) == {"city": "Paris"}
        expect(page.locator("#input-items .result")).to_contain_text("sunny, 21 C")
        expect(page.locator("#input-items .result")).to_contain_text(chain.call_id)
        expect(turns.nth(1).locator(".result")).to_be_visible()
        expect(page.locator("#tools li.tool .name")).to_have_text("get_weather")
        # The long input whole, visible, and nothing wider than the page.
        long = turns.nth(2).locator(".items pre.text")
        assert long.inner_text() == LONG
        expect(long).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.screenshot(path=str(tmp_path / "chain.png"), full_page=True)
        assert (tmp_path / "chain.png").stat().st_size > 10_000
        # Linked both ways: in the list, and from this page to its neighbours' pages.
        for i in (1, 2):
            links = turns.nth(i).locator(".turn-links")
            expect(links.locator("a.previous")).to_have_attribute("href", f"#turn-{ids[i - 1]}")
            expect(links.locator("a.next")).to_have_attribute("href", f"#turn-{ids[i + 1]}")
        expect(page.locator("#previous-link a")).to_have_attribute("href", f"/inspect/{ids[0]}")
        page.locator("#next-links a").click()
        expect(page).to_have_url(f"{srv.base_url}/inspect/{ids[2]}")
        expect(page.locator("#turns li.turn.current")).to_have_attribute("data-turn", ids[2])
        assert page.locator("#input-items pre.text").inner_text() == LONG
        page.locator(f'#turns li[data-turn="{ids[3]}"] .turn-head a.id').click()
        expect(page).to_have_url(f"{srv.base_url}/inspect/{ids[3]}")
        expect(page.locator("#response-format pre")).to_contain_text('"verdict"')
        expect(page.locator("#turns li.turn")).to_have_count(4)


def test_an_unknown_id_says_so_and_an_embedding_has_no_token_chart(
    server: ServerThread, page: Page
) -> None:
    page.goto(f"{server.base_url}/inspect/resp_nowhere")
    expect(page.locator("body")).to_have_attribute("data-state", "missing")
    expect(page.locator("#live")).to_have_text("not found")
    expect(page.locator("#error")).to_contain_text("Not found")
    expect(page.locator("#error")).to_contain_text("resp_nowhere")
    with sqlite3.connect(server.state.store.path) as conn:  # as the embeddings service writes
        request = {"kind": "embedding", "model": "m", "body": {"model": "m"}, "inputs": 2,
                   "prompt_tokens": 9}  # fmt: skip
        ended = {"model": "m", "usage": {"prompt_tokens": 9, "total_tokens": 9}}
        for stream, type_, data in [
            ("embd-page/request", "omni.request.accepted", request),
            ("embd-page", "embedding.in_progress", {"id": "embd-page"}),
            ("embd-page", "embedding.completed", ended),
        ]:
            seq = 1 if type_ == "embedding.completed" else 0
            conn.execute(
                "INSERT INTO events (stream_id, seq, type, data, created_at)"
                " VALUES (?, ?, ?, ?, 1000)",
                (stream, seq, type_, json.dumps(data)),
            )
    page.goto(f"{server.base_url}/inspect/embd-page")
    expect(page.locator("body")).to_have_attribute("data-state", "final")
    expect(page.locator("#kind")).to_have_text("embedding")
    expect(page.locator("#tokens")).to_be_hidden()
    expect(page.locator("#input-items .note")).to_contain_text("2 inputs, 9 tokens")


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
