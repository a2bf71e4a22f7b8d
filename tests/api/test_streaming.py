"""POST /v1/responses with stream=true: event order (spec c.2), numbering, indices, the
SDK's stream helper, and the raw SSE bytes."""

from __future__ import annotations

import httpx
import pytest
from openai import OpenAI

from tests.api._helpers import MODEL, TERMINAL, parse_frames, post_stream

ITEM_EVENTS = (
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
)


def check_plain_text_events(events: list) -> None:  # type: ignore[type-arg]
    """Spec c.2 exactly, with consistent ids and indices, for SDK event models."""
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ], types
    n_deltas = sum(1 for t in types if t == "response.output_text.delta")
    assert types[4 : 4 + n_deltas] == ["response.output_text.delta"] * n_deltas, types
    assert types[4 + n_deltas :] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        types[-1],
    ], types
    assert types[-1] in ("response.completed", "response.incomplete"), types
    assert [e.sequence_number for e in events] == list(range(len(events)))

    created, in_progress, added, part_added = events[:4]
    deltas = events[4 : 4 + n_deltas]
    text_done, part_done, item_done, terminal = events[4 + n_deltas :]

    rid = created.response.id
    for lifecycle in (created, in_progress, terminal):
        assert lifecycle.response.id == rid
    assert created.response.output == [] and created.response.status == "in_progress"
    assert in_progress.response.output == [] and in_progress.response.status == "in_progress"
    assert created.response.usage is None

    item = added.item
    assert item.type == "message" and item.role == "assistant"
    assert item.status == "in_progress" and item.content == []
    assert added.output_index == 0
    for e in (part_added, *deltas, text_done, part_done):
        assert e.item_id == item.id
        assert e.output_index == 0
        assert e.content_index == 0
    assert part_added.part.type == "output_text" and part_added.part.text == ""
    for d in deltas:
        assert d.delta != ""
        assert d.logprobs == []
    text = "".join(d.delta for d in deltas)
    assert text_done.text == text
    assert text_done.logprobs == []
    assert part_done.part.text == text
    assert item_done.output_index == 0
    assert item_done.item.id == item.id
    assert item_done.item.content[0].text == text

    final = terminal.response
    assert [o.id for o in final.output] == [item.id]
    assert final.output_text == text
    done_item = item_done.item
    assert (final.output[0].id, final.output[0].status) == (done_item.id, done_item.status)
    assert final.output[0].content[0].text == done_item.content[0].text
    status = terminal.type.removeprefix("response.")
    assert final.status == status
    assert item_done.item.status == status
    u = final.usage
    assert u.total_tokens == u.input_tokens + u.output_tokens
    if status == "incomplete":
        assert final.incomplete_details.reason == "max_output_tokens"
    else:
        assert final.completed_at is not None


def test_raw_stream_event_order(client: OpenAI) -> None:
    stream = client.responses.create(
        model=MODEL, input="Tell me a story", stream=True, max_output_tokens=16
    )
    events = list(stream)
    check_plain_text_events(events)
    assert events[-1].response.usage.output_tokens <= 16


def test_raw_stream_one_token(client: OpenAI) -> None:
    events = list(client.responses.create(model=MODEL, input="x", stream=True, max_output_tokens=1))
    check_plain_text_events(events)


def test_streamed_and_retrieved_agree(client: OpenAI) -> None:
    events = list(
        client.responses.create(model=MODEL, input="agree?", stream=True, max_output_tokens=8)
    )
    final = events[-1].response
    got = client.responses.retrieve(final.id)
    assert got.model_dump() == final.model_dump()


def test_stream_helper_incomplete_raises_on_final(client: OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="Hi", max_output_tokens=8) as stream:
        events = list(stream)
        snapshots = [e.snapshot for e in events if e.type == "response.output_text.delta"]
        check_plain_text_events(events)
        text = events[-1].response.output_text
        if snapshots:
            assert snapshots[-1] == text
        if events[-1].type == "response.incomplete":
            with pytest.raises(RuntimeError):
                stream.get_final_response()
        else:
            assert stream.get_final_response().output_text == text


def test_stream_helper_completed_final_response(client: OpenAI) -> None:
    """A completed run needs the random model to reach EOS; at temperature 2 it usually
    does within a few hundred tokens."""
    for _ in range(8):
        with client.responses.stream(
            model=MODEL, input="Go on", max_output_tokens=1024, temperature=2.0
        ) as stream:
            events = list(stream)
            check_plain_text_events(events)
            if events[-1].type != "response.completed":
                with pytest.raises(RuntimeError):
                    stream.get_final_response()
                continue
            final = stream.get_final_response()
        assert final.status == "completed"
        assert final.completed_at is not None
        assert final.incomplete_details is None
        assert final.output_text == "".join(
            e.delta for e in events if e.type == "response.output_text.delta"
        )
        assert final.usage.output_tokens < 1024
        assert final.output[0].status == "completed"
        got = client.responses.retrieve(final.id)
        assert got.id == final.id and got.status == "completed"
        assert [o.id for o in got.output] == [o.id for o in final.output]
        assert got.output_text == final.output_text
        assert got.usage == final.usage
        return
    pytest.fail("no completed response in 8 tries (the model never reached EOS)")


def test_raw_sse_bytes(http: httpx.Client) -> None:
    response, raw, frames = post_stream(
        http, {"model": MODEL, "input": "bytes please", "max_output_tokens": 12}
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers.get("cache-control") == "no-cache"
    assert raw.startswith(b"event: response.created\ndata: {")
    assert frames, raw
    for i, f in enumerate(frames):
        assert f.event == f.data["type"]
        assert f.id == f.data["sequence_number"] == i
        data_line = f.raw.split(b"\n")[1][len(b"data: ") :]
        assert f.raw == b"event: %s\ndata: %s\nid: %d\n\n" % (f.event.encode(), data_line, f.id)
        assert "error" not in f.data  # a top-level error key makes the SDK raise
    assert frames[-1].event in TERMINAL
    types = [f.event for f in frames]
    assert set(types) <= {"response.created", "response.in_progress", *ITEM_EVENTS, *TERMINAL}
    # No block without data (an event-only block breaks the SDK's JSON decoding).
    for block in raw.split(b"\n\n")[:-1]:
        if not block.startswith(b":"):
            assert b"\ndata: " in block


def test_raw_sse_bytes_reparse_with_sdk_decoder(http: httpx.Client) -> None:
    """The SDK's own SSE decoder reads the same events out of the bytes."""
    from openai._streaming import SSEDecoder

    _, raw, frames = post_stream(http, {"model": MODEL, "input": "decode", "max_output_tokens": 6})
    # Feed the bytes in awkward chunks (splitting inside multi-byte characters too).
    chunks = [raw[i : i + 7] for i in range(0, len(raw), 7)]
    sses = list(SSEDecoder().iter_bytes(iter(chunks)))
    assert [s.event for s in sses] == [f.event for f in frames]
    assert [s.json() for s in sses] == [f.data for f in frames]
    assert [int(s.id) for s in sses] == [f.id for f in frames]


def test_stream_frames_parse_as_sdk_events(http: httpx.Client) -> None:
    """Each frame's JSON validates strictly as the SDK's event union."""
    from openai._models import validate_type
    from openai.types.responses import ResponseStreamEvent

    _, _, frames = post_stream(http, {"model": MODEL, "input": "validate", "max_output_tokens": 4})
    parsed = [validate_type(type_=ResponseStreamEvent, value=f.data) for f in frames]
    assert [p.type for p in parsed] == [f.event for f in frames]


def test_streaming_under_the_unprefixed_path(http: httpx.Client) -> None:
    _, raw, frames = post_stream(
        http, {"model": MODEL, "input": "no prefix", "max_output_tokens": 3}, path="/responses"
    )
    assert frames[0].event == "response.created" and frames[-1].event in TERMINAL
    assert parse_frames(raw) == frames
