"""POST /v1/responses/{id}/cancel (spec c.4b, d, checklist 13): a running background
response stops promptly and keeps its output; a queued one never starts; a finished one is
returned unchanged; cancelling twice is idempotent; foreground → 400, unknown → 404."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from tests.api._helpers import (
    CANCEL_REQUESTED,
    LONG,
    LONG_RUN,
    MODEL,
    assert_error,
    capture,
    is_finished,
    log_bytes,
    n_deltas,
    parse_frames,
    read_log,
    strip_keepalives,
    wait_for,
)


def facts(server: Any, rid: str) -> list[str]:
    return [e.type for e in read_log(server, f"{rid}/request")]


def recorded_tokens(server: Any, rid: str) -> list[int]:
    return [t for r in read_log(server, f"{rid}/tokens") for t in json.loads(r.data)]


@pytest.fixture
def cleanup(client: OpenAI, server):  # type: ignore[no-untyped-def]
    """Ids of long background runs to cancel whatever the test's outcome."""
    ids: list[str] = []
    yield ids
    for rid in ids:
        try:
            client.responses.cancel(rid)
        except Exception:  # noqa: BLE001 - best effort
            pass
    for rid in ids:
        wait_for(lambda rid=rid: is_finished(server, rid), timeout=60)


def start_long(client: OpenAI, cleanup: list[str]) -> str:
    r = client.responses.create(model=MODEL, background=True, **LONG_RUN)
    cleanup.append(r.id)
    return r.id


def test_cancel_running_background(client: OpenAI, http: httpx.Client, server, cleanup) -> None:  # type: ignore[no-untyped-def]
    rid = start_long(client, cleanup)
    assert wait_for(lambda: n_deltas(server, rid) >= 10, timeout=60)

    start = time.monotonic()
    cancelled = client.responses.cancel(rid)
    # A hang's bound, with room for a loaded machine: the run, left going, ends within ~2.5 s
    # (the tiny model's context); the output tokens below show the cancel was prompt.
    assert time.monotonic() - start < 5.0, "cancel was not prompt"
    assert cancelled.id == rid
    assert cancelled.status == "cancelled"
    assert cancelled.background is True
    assert 10 <= cancelled.usage.output_tokens < LONG // 4  # left going: ~2,000
    assert cancelled.completed_at is None

    # The output so far is kept: its text is the deltas of the log.
    rows = read_log(server, rid)
    text = "".join(
        json.loads(e.data)["delta"] for e in rows if e.type == "response.output_text.delta"
    )
    assert cancelled.output_text == text != ""
    assert len(cancelled.output) == 1 and cancelled.output[0].status == "incomplete"

    # The log: ... output_item.done, then response.incomplete carrying status cancelled,
    # and nothing after it.
    types = [e.type for e in rows]
    assert types[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ], types[-6:]
    assert [e.seq for e in rows] == list(range(len(rows)))
    last = json.loads(rows[-1].data)["response"]
    assert last["status"] == "cancelled"
    assert last == cancelled.model_dump(mode="json", exclude_unset=True)
    assert CANCEL_REQUESTED in facts(server, rid)
    assert len(recorded_tokens(server, rid)) == cancelled.usage.output_tokens

    # Retrieve agrees; a full replay is the log, ending with the cancelled response.
    assert http.get(f"/v1/responses/{rid}").json() == last
    _, raw = capture(http, "GET", f"/v1/responses/{rid}", params={"stream": "true"})
    assert raw == log_bytes(server, rid)
    events = list(client.responses.retrieve(rid, stream=True))  # strict: known types only
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.status == "cancelled"

    # Cancelling again returns the same object, and records nothing more.
    n_rows, n_facts = len(rows), len(facts(server, rid))
    again = client.responses.cancel(rid)
    assert again.model_dump() == cancelled.model_dump()
    res = http.post(f"/v1/responses/{rid}/cancel")
    assert res.status_code == 200 and res.json() == last
    assert len(read_log(server, rid)) == n_rows
    assert len(facts(server, rid)) == n_facts
    assert facts(server, rid).count(CANCEL_REQUESTED) == 1


def test_cancel_ends_a_live_follower(client: OpenAI, http: httpx.Client, server, cleanup) -> None:  # type: ignore[no-untyped-def]
    """A client following the running stream sees it end with response.incomplete
    (status cancelled) and the stream closes."""
    rid = start_long(client, cleanup)
    got: dict[str, bytes] = {}

    def follow() -> None:
        with httpx.Client(base_url=server.base_url, timeout=10) as h:
            got["raw"] = capture(h, "GET", f"/v1/responses/{rid}", params={"stream": "true"})[1]

    t = threading.Thread(target=follow)
    t.start()
    assert wait_for(lambda: n_deltas(server, rid) >= 10, timeout=60)
    client.responses.cancel(rid)
    t.join(timeout=5)
    assert not t.is_alive(), "the follower's stream did not end after the cancel"
    frames = parse_frames(got["raw"])
    assert frames[-1].event == "response.incomplete"
    assert frames[-1].data["response"]["status"] == "cancelled"
    assert strip_keepalives(got["raw"]) == log_bytes(server, rid)


# A queued response cancelled before the engine reaches it: tests/service/test_cancel.py.


def test_cancel_finished_background_returns_it_unchanged(
    client: OpenAI, http: httpx.Client, server
) -> None:  # type: ignore[no-untyped-def]
    r = client.responses.create(model=MODEL, input="short", background=True, max_output_tokens=5)
    assert wait_for(lambda: is_finished(server, r.id), timeout=60)
    final = client.responses.retrieve(r.id)
    assert final.status in ("completed", "incomplete")
    n_rows = len(read_log(server, r.id))
    got = client.responses.cancel(r.id)
    assert got.status == final.status
    assert got.model_dump() == final.model_dump()
    assert (
        http.post(f"/v1/responses/{r.id}/cancel").json() == http.get(f"/v1/responses/{r.id}").json()
    )
    assert len(read_log(server, r.id)) == n_rows
    assert CANCEL_REQUESTED not in facts(server, r.id)


def test_cancel_foreground_is_400(client: OpenAI, http: httpx.Client, server) -> None:  # type: ignore[no-untyped-def]
    r = client.responses.create(model=MODEL, input="fg", max_output_tokens=3)
    with pytest.raises(BadRequestError) as exc:
        client.responses.cancel(r.id)
    assert exc.value.status_code == 400
    assert_error(http.post(f"/v1/responses/{r.id}/cancel"), 400)
    assert client.responses.retrieve(r.id).model_dump() == r.model_dump()
    assert CANCEL_REQUESTED not in facts(server, r.id)


def test_cancel_unknown_is_404(client: OpenAI, http: httpx.Client) -> None:
    with pytest.raises(NotFoundError):
        client.responses.cancel("resp_doesnotexist")
    assert_error(http.post("/v1/responses/resp_doesnotexist/cancel"), 404)


def test_cancel_store_false_is_404(client: OpenAI, http: httpx.Client) -> None:
    r = client.responses.create(model=MODEL, input="secret", store=False, max_output_tokens=3)
    with pytest.raises(NotFoundError):
        client.responses.cancel(r.id)
    assert_error(http.post(f"/v1/responses/{r.id}/cancel"), 404)


def test_cancel_deleted_is_404(client: OpenAI, http: httpx.Client, server) -> None:  # type: ignore[no-untyped-def]
    r = client.responses.create(model=MODEL, input="bye", background=True, max_output_tokens=3)
    assert wait_for(lambda: is_finished(server, r.id), timeout=60)
    client.responses.delete(r.id)
    with pytest.raises(NotFoundError):
        client.responses.cancel(r.id)
