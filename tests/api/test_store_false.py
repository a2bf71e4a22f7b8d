"""store:false: the create works (plain and streamed) but nothing stays readable, and its
events leave the log once the stream has been read."""

from __future__ import annotations

import httpx
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from tests.api._helpers import MODEL, TERMINAL, assert_error, post_stream, read_log, wait_for


def _assert_gone(client: OpenAI, http: httpx.Client, server, rid: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NotFoundError):
        client.responses.retrieve(rid)
    with pytest.raises(NotFoundError):
        client.responses.input_items.list(rid)
    with pytest.raises(NotFoundError):
        client.responses.delete(rid)
    assert_error(http.get(f"/v1/responses/{rid}"), 404)
    assert_error(http.get(f"/v1/responses/{rid}", params={"stream": "true"}), 404)
    assert_error(http.get(f"/v1/responses/{rid}/input_items"), 404)
    assert_error(http.delete(f"/v1/responses/{rid}"), 404)
    with pytest.raises(BadRequestError) as exc:
        client.responses.create(model=MODEL, previous_response_id=rid, input="next")
    assert exc.value.code == "previous_response_not_found"
    assert exc.value.param == "previous_response_id"
    assert wait_for(
        lambda: not read_log(server, rid) and not read_log(server, f"{rid}/request"), timeout=5
    ), "store:false events are still in the log"


def test_store_false_plain(client: OpenAI, http: httpx.Client, server) -> None:  # type: ignore[no-untyped-def]
    r = client.responses.create(model=MODEL, input="secret", store=False, max_output_tokens=4)
    assert r.status in ("completed", "incomplete")
    assert r.output and r.usage is not None
    _assert_gone(client, http, server, r.id)


def test_store_false_streamed(client: OpenAI, http: httpx.Client, server) -> None:  # type: ignore[no-untyped-def]
    events = list(
        client.responses.create(
            model=MODEL, input="secret stream", store=False, stream=True, max_output_tokens=6
        )
    )
    assert events[0].type == "response.created" and events[-1].type in TERMINAL
    assert [e.sequence_number for e in events] == list(range(len(events)))
    _assert_gone(client, http, server, events[-1].response.id)


def test_store_false_streamed_with_stream_helper(
    client: OpenAI, http: httpx.Client, server
) -> None:  # type: ignore[no-untyped-def]
    with client.responses.stream(
        model=MODEL, input="helper", store=False, max_output_tokens=3
    ) as stream:
        events = list(stream)
    assert events[-1].type in TERMINAL
    _assert_gone(client, http, server, events[-1].response.id)


def test_store_false_short_streams_always_reach_the_client(http: httpx.Client, server) -> None:  # type: ignore[no-untyped-def]
    """A store:false stream is purged once nobody follows it; a generation that ends
    before the SSE body starts must still be delivered, never purged first."""
    for i in range(20):
        _, _, frames = post_stream(
            http,
            {"model": MODEL, "input": f"q{i}", "store": False, "max_output_tokens": 1},
        )
        assert frames and frames[0].event == "response.created", i
        assert frames[-1].event in TERMINAL, i
        rid = frames[0].data["response"]["id"]
        assert wait_for(lambda rid=rid: not read_log(server, rid), timeout=60)
