"""GET /v1/responses/{id}: the JSON equals the stream's terminal response, and
?stream=true replays the original bytes (from the start, after `starting_after=N`,
or after a `Last-Event-ID: N` header)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest
from openai import OpenAI

from tests.api._helpers import (
    MODEL,
    Frame,
    capture,
    parse_frames,
    post_stream,
    strip_keepalives,
)


@dataclass(frozen=True)
class Original:
    id: str
    raw: bytes
    frames: list[Frame]

    @property
    def last_seq(self) -> int:
        return self.frames[-1].seq

    def after(self, n: int) -> bytes:
        return b"".join(f.raw for f in self.frames if f.seq > n)


@pytest.fixture(scope="module")
def original(server) -> Original:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        _, raw, frames = post_stream(
            http, {"model": MODEL, "input": "Replay me, please.", "max_output_tokens": 12}
        )
    assert frames[0].event == "response.created"
    assert len(frames) >= 8  # created, in_progress, 2 opening, >=1 delta, 3 closing, terminal
    return Original(frames[0].data["response"]["id"], strip_keepalives(raw), frames)


def test_retrieve_equals_terminal_response(
    original: Original, http: httpx.Client, client: OpenAI
) -> None:
    terminal = original.frames[-1].data["response"]
    res = http.get(f"/v1/responses/{original.id}")
    assert res.status_code == 200
    assert res.json() == terminal
    got = client.responses.retrieve(original.id)
    assert [o.id for o in got.output] == [o["id"] for o in terminal["output"]]
    deltas = "".join(f.data["delta"] for f in original.frames if f.event.endswith("text.delta"))
    assert got.output_text == deltas
    assert got.status == terminal["status"]


def test_full_replay_is_byte_identical(original: Original, http: httpx.Client) -> None:
    res, raw = capture(http, "GET", f"/v1/responses/{original.id}", params={"stream": "true"})
    assert res.status_code == 200
    assert res.headers["content-type"].startswith("text/event-stream")
    assert raw == original.raw
    assert parse_frames(raw) == original.frames


def test_replay_under_the_unprefixed_path(original: Original, http: httpx.Client) -> None:
    _, raw = capture(http, "GET", f"/responses/{original.id}", params={"stream": "true"})
    assert raw == original.raw


@pytest.mark.parametrize("n", [-1, 0, 1, 2, 3, 5])
def test_replay_starting_after(original: Original, http: httpx.Client, n: int) -> None:
    res, raw = capture(
        http, "GET", f"/v1/responses/{original.id}", params={"stream": "true", "starting_after": n}
    )
    assert res.status_code == 200
    assert raw == original.after(n)


def test_replay_starting_after_the_one_before_last(original: Original, http: httpx.Client) -> None:
    n = original.last_seq - 1
    _, raw = capture(
        http, "GET", f"/v1/responses/{original.id}", params={"stream": "true", "starting_after": n}
    )
    assert raw == original.frames[-1].raw


@pytest.mark.parametrize("past", [0, 3])
def test_replay_starting_after_the_terminal_event_ends_at_once(
    original: Original, http: httpx.Client, past: int
) -> None:
    """Nothing is left after the terminal event of a finished response: the stream must
    end (empty), not idle with keep-alives forever."""
    n = original.last_seq + past
    _, raw = capture(
        http,
        "GET",
        f"/v1/responses/{original.id}",
        params={"stream": "true", "starting_after": n},
        deadline=2.0,
    )
    assert strip_keepalives(raw) == b""


@pytest.mark.parametrize("n", [0, 4])
def test_last_event_id_header_acts_like_starting_after(
    original: Original, http: httpx.Client, n: int
) -> None:
    _, raw = capture(
        http,
        "GET",
        f"/v1/responses/{original.id}",
        params={"stream": "true"},
        headers={"last-event-id": str(n)},
    )
    assert raw == original.after(n)


def test_starting_after_wins_over_last_event_id(original: Original, http: httpx.Client) -> None:
    _, raw = capture(
        http,
        "GET",
        f"/v1/responses/{original.id}",
        params={"stream": "true", "starting_after": 2},
        headers={"last-event-id": "5"},
    )
    assert raw == original.after(2)


def test_bad_starting_after_is_400(original: Original, http: httpx.Client) -> None:
    for bad in ("abc", "-2"):
        res = http.get(
            f"/v1/responses/{original.id}", params={"stream": "true", "starting_after": bad}
        )
        assert res.status_code == 400
        assert res.json()["error"]["param"] == "starting_after"


def test_sdk_retrieve_stream_from_start(original: Original, client: OpenAI) -> None:
    events = list(client.responses.retrieve(original.id, stream=True))
    assert [e.sequence_number for e in events] == [f.seq for f in original.frames]
    assert [e.model_dump(mode="json", exclude_unset=True) for e in events] == [
        f.data for f in original.frames
    ]


@pytest.mark.parametrize("n", [0, 3, 6])
def test_sdk_retrieve_stream_starting_after(original: Original, client: OpenAI, n: int) -> None:
    events = list(client.responses.retrieve(original.id, stream=True, starting_after=n))
    expected = [f for f in original.frames if f.seq > n]
    assert [e.sequence_number for e in events] == [f.seq for f in expected]
    assert [e.type for e in events] == [f.event for f in expected]


def test_sdk_stream_helper_resumes_by_response_id(original: Original, client: OpenAI) -> None:
    """responses.stream(response_id=...) sends GET ?stream=true with no starting_after and
    needs the replay to begin with response.created."""
    with client.responses.stream(response_id=original.id) as stream:
        events = list(stream)
        assert [e.type for e in events] == [f.event for f in original.frames]
        assert [e.sequence_number for e in events] == [f.seq for f in original.frames]
        terminal = events[-1]
        assert (
            terminal.response.output_text
            == original.frames[-1].data["response"]["output"][0]["content"][0]["text"]
        )
        if terminal.type == "response.completed":
            assert stream.get_final_response().id == original.id
        else:
            with pytest.raises(RuntimeError):
                stream.get_final_response()


def test_sdk_stream_helper_resumes_with_starting_after(original: Original, client: OpenAI) -> None:
    with client.responses.stream(response_id=original.id, starting_after=4) as stream:
        events = list(stream)
    assert [e.sequence_number for e in events] == [f.seq for f in original.frames if f.seq > 4]


def test_replay_of_a_completed_response_ends_with_completed(
    client: OpenAI, http: httpx.Client
) -> None:
    """Retrieve of a finished response is its terminal response; the replay's last frame
    carries the same object."""
    r = client.responses.create(model=MODEL, input="short", max_output_tokens=3)
    _, raw = capture(http, "GET", f"/v1/responses/{r.id}", params={"stream": "true"})
    frames = parse_frames(raw)
    assert frames[0].event == "response.created"
    assert frames[-1].data["response"] == http.get(f"/v1/responses/{r.id}").json()
    assert [f.seq for f in frames] == list(range(len(frames)))


def _sdk_event_types() -> set[str]:
    import typing

    from openai.types.responses import ResponseStreamEvent

    union = typing.get_args(ResponseStreamEvent)[0]  # Annotated[Union[...], discriminator]
    return {typing.get_args(m.model_fields["type"].annotation)[0] for m in typing.get_args(union)}


def test_replay_of_a_disconnected_stream_is_valid_for_the_sdk(
    client: OpenAI, http: httpx.Client, server
) -> None:  # type: ignore[no-untyped-def]
    """A client that drops a foreground stream cancels it; the log still ends with a
    terminal event, and a later replay must only contain event types the SDK knows
    (spec c.4b: the SDK has no `response.cancelled` event)."""
    from tests.api._helpers import read_log, wait_for

    stream = client.responses.create(
        model=MODEL, input="a long one", stream=True, max_output_tokens=1500
    )
    first = []
    for event in stream:
        first.append(event)
        if len(first) >= 6:
            break
    stream.close()
    rid = first[0].response.id
    terminal = {"response.completed", "response.incomplete", "response.failed"}
    assert wait_for(lambda: read_log(server, rid)[-1].type in terminal, timeout=60)
    status = client.responses.retrieve(rid).status
    assert status in ("cancelled", "completed")  # completed only if EOS came before the cancel
    if status == "cancelled":
        assert read_log(server, rid)[-1].type == "response.incomplete"

    _, raw = capture(http, "GET", f"/v1/responses/{rid}", params={"stream": "true"})
    frames = parse_frames(raw)
    known = _sdk_event_types()
    assert [f.event for f in frames if f.event not in known] == []
    events = list(client.responses.retrieve(rid, stream=True))  # strict validation
    assert events[0].type == "response.created"
