"""Resuming a background response while it is still queued or running (spec c.5,
checklist 12 and 14): GET /v1/responses/{id}?stream=true&starting_after=N (or a
Last-Event-ID header) picks up exactly after seq N, replays what is stored, then follows
live to the terminal event: no gap, no duplicate at the seam. Many followers share one
generation."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.api._helpers import (
    KEEPALIVE,
    LONG_RUN,
    MODEL,
    Frame,
    capture,
    holding,
    is_finished,
    log_bytes,
    n_deltas,
    parse_frames,
    read_log,
    strip_keepalives,
    wait_for,
)


def last_seq(server: Any, rid: str) -> int:
    return read_log(server, rid)[-1].seq


class Live:
    """Reads one SSE response in its own thread; what has arrived so far is visible."""

    def __init__(self, base_url: str, method: str, url: str, **kwargs: Any):
        self.buf = bytearray()
        self.chunks: list[tuple[float, bytes]] = []
        self.status: int | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._args = (base_url, method, url, kwargs)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_chunk(self, chunk: bytes) -> None:
        with self._lock:
            self.buf.extend(chunk)
            self.chunks.append((time.monotonic(), chunk))

    def _run(self) -> None:
        base_url, method, url, kwargs = self._args
        try:
            with httpx.Client(base_url=base_url, timeout=10) as h:
                res, _ = capture(h, method, url, on_chunk=self._on_chunk, **kwargs)
                self.status = res.status_code
        except BaseException as exc:  # noqa: BLE001 - reported by result()
            self.error = exc

    def frames(self) -> list[Frame]:
        with self._lock:
            raw = bytes(self.buf)
        return parse_frames(raw[: raw.rfind(b"\n\n") + 2] if b"\n\n" in raw else b"")

    def wait_seq(self, n: int, timeout: float = 5.0) -> bool:
        return wait_for(lambda: any(f.seq >= n for f in self.frames()), timeout=timeout)

    def result(self, timeout: float = 10.0) -> bytes:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "stream still open"
        if self.error is not None:
            raise self.error
        assert self.status == 200, (self.status, bytes(self.buf[:300]))
        return bytes(self.buf)


@pytest.fixture
def cleanup(client: OpenAI, server):  # type: ignore[no-untyped-def]
    ids: list[str] = []
    yield ids
    for rid in ids:
        try:
            client.responses.cancel(rid)
        except Exception:  # noqa: BLE001 - best effort
            pass
    for rid in ids:
        wait_for(lambda rid=rid: is_finished(server, rid), timeout=60)


def resume(server: Any, rid: str, after: int | None = None, **kwargs: Any) -> Live:
    params = {"stream": "true"}
    if after is not None:
        params["starting_after"] = str(after)
    return Live(server.base_url, "GET", f"/v1/responses/{rid}", params=params, **kwargs)


def full_replay(server: Any, rid: str) -> bytes:
    with httpx.Client(base_url=server.base_url, timeout=10) as h:
        res, raw = capture(h, "GET", f"/v1/responses/{rid}", params={"stream": "true"})
    assert res.status_code == 200
    assert raw == log_bytes(server, rid)
    return raw


def test_resume_running_at_several_points(server, cleanup) -> None:  # type: ignore[no-untyped-def]
    """(original live stream up to and including seq N) + (resumed stream) == the full
    replay, byte for byte, for N at fixed points and at the live edge."""
    original = Live(
        server.base_url,
        "POST",
        "/v1/responses",
        json={
            "model": MODEL,
            "background": True,
            "stream": True,
            **LONG_RUN,
        },
    )
    assert original.wait_seq(0)
    rid = original.frames()[0].data["response"]["id"]
    cleanup.append(rid)

    resumed: dict[int, Live] = {}
    for target in (0, 1, 2, 3, 4, 5, 20, 60, 150):
        assert original.wait_seq(target), f"no seq {target} in the live stream"
        assert not is_finished(server, rid), "finished too early (EOS?) to test a live resume"
        if target not in resumed:
            resumed[target] = resume(server, rid, target)
        edge = last_seq(server, rid)  # resume right at the live edge, too
        if edge not in resumed:
            resumed[edge] = resume(server, rid, edge)
    for n, follower in resumed.items():  # each resumed stream is live: its next event came
        assert follower.wait_seq(n + 1, timeout=60), f"no seq {n + 1} after {n}"
    assert not is_finished(server, rid)
    cancelled = server.call(server.state.responses.cancel(rid))
    assert cancelled["status"] == "cancelled"

    live = strip_keepalives(original.result())
    replay = full_replay(server, rid)
    assert live == replay
    frames = parse_frames(replay)
    assert len(frames) > 150
    for n, follower in sorted(resumed.items()):
        got = strip_keepalives(follower.result())
        head = b"".join(f.raw for f in parse_frames(live) if f.seq <= n)
        got_frames = parse_frames(got)
        assert got_frames and got_frames[0].seq == n + 1, (n, got_frames[:1])
        assert [f.seq for f in got_frames] == list(range(n + 1, len(frames))), n
        assert head + got == replay, f"seam at starting_after={n} is not exact"


def test_resume_queued_sends_keepalives_first(client: OpenAI, server, cleanup) -> None:  # type: ignore[no-untyped-def]
    """A resume of a queued response waits, sending `: keep-alive` comments (keepalive is
    1 s here), until the engine reaches it; then the events follow, none missing."""
    with holding(server) as held:
        queued = client.responses.create(
            model=MODEL, input="waiting", background=True, max_output_tokens=20
        ).id
        cleanup.append(queued)
        assert client.responses.retrieve(queued).status == "queued"
        assert last_seq(server, queued) == 1  # created, queued

        waited = time.monotonic()
        after_queued = resume(server, queued, 1)
        from_start = resume(server, queued)
        by_header = resume(server, queued, headers={"last-event-id": "0"})
        followers = (after_queued, from_start, by_header)
        assert wait_for(lambda: all(f.buf.count(KEEPALIVE) >= 2 for f in followers), 10)
        assert client.responses.retrieve(queued).status == "queued"
        held.release()
        assert wait_for(lambda: is_finished(server, queued), timeout=60)
        waited = time.monotonic() - waited
        replay = full_replay(server, queued)
        frames = parse_frames(replay)
        assert [f.event for f in frames[:3]] == [
            "response.created",
            "response.queued",
            "response.in_progress",
        ]

        raw = after_queued.result()
        assert raw.startswith(KEEPALIVE + KEEPALIVE), raw[:80]
        first = raw.replace(KEEPALIVE, b"", 1)
        assert strip_keepalives(raw) == b"".join(f.raw for f in frames if f.seq > 1)
        assert parse_frames(strip_keepalives(first))[0].event == "response.in_progress"
        # The keep-alives came while nothing else did, one a second (1 s here) at most.
        assert raw.count(KEEPALIVE, 0, raw.index(b"event: ")) <= waited + 1

        raw = from_start.result()
        head = frames[0].raw + frames[1].raw
        assert raw.startswith(head + KEEPALIVE), raw[:600]
        assert strip_keepalives(raw) == replay

        raw = by_header.result()
        assert raw.startswith(frames[1].raw + KEEPALIVE), raw[:600]
        assert strip_keepalives(raw) == b"".join(f.raw for f in frames if f.seq > 0)


def test_the_sdk_follows_a_stream_through_keepalives(client: OpenAI, server, cleanup) -> None:  # type: ignore[no-untyped-def]
    """Keep-alives after frames with an `id:` (a queued or slow response followed live) must
    not reach the SDK as an event: its decoder remembers the id and would hand an empty event
    to json.loads."""
    with holding(server) as held:
        queued = client.responses.create(
            model=MODEL, input="waiting", background=True, max_output_tokens=5
        ).id
        cleanup.append(queued)
        seen: list[str] = []

        def follow() -> None:
            for event in client.responses.retrieve(queued, stream=True):
                seen.append(event.type)

        follower = threading.Thread(target=follow)
        follower.start()
        assert wait_for(lambda: server.state.notifier.followers(queued) == 1)
        # A follower that came after the SDK's has had keep-alives: so has the SDK's.
        live = resume(server, queued)
        assert wait_for(lambda: bytes(live.buf).count(KEEPALIVE) >= 2, timeout=60)
        held.release()
        follower.join(timeout=30)
    assert not follower.is_alive()
    assert seen[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert seen[-1] in ("response.completed", "response.incomplete")


def test_last_event_id_resumes_a_running_response(client: OpenAI, server, cleanup) -> None:  # type: ignore[no-untyped-def]
    rid = client.responses.create(model=MODEL, background=True, **LONG_RUN).id
    cleanup.append(rid)
    assert wait_for(lambda: n_deltas(server, rid) >= 5, timeout=60)
    points = [3, last_seq(server, rid)]
    followers = {n: resume(server, rid, headers={"last-event-id": str(n)}) for n in points}
    # starting_after wins over the header.
    both = resume(server, rid, 3, headers={"last-event-id": str(points[1])})
    assert wait_for(lambda: last_seq(server, rid) > points[1] + 50, timeout=60)
    assert not is_finished(server, rid)
    client.responses.cancel(rid)
    replay = full_replay(server, rid)
    frames = parse_frames(replay)
    for n, follower in followers.items():
        got = strip_keepalives(follower.result())
        assert got == b"".join(f.raw for f in frames if f.seq > n), n
    assert strip_keepalives(both.result()) == b"".join(f.raw for f in frames if f.seq > 3)


def test_many_followers_share_one_generation(client: OpenAI, server, cleanup) -> None:  # type: ignore[no-untyped-def]
    generations = server.state.engine.generations
    rid = client.responses.create(model=MODEL, background=True, **LONG_RUN).id
    cleanup.append(rid)
    followers = [resume(server, rid) for _ in range(5)]
    events: list[Any] = []

    def sdk_follower() -> None:
        with client.responses.stream(response_id=rid) as stream:
            events.extend(stream)

    sdk = threading.Thread(target=sdk_follower, daemon=True)
    sdk.start()
    assert wait_for(lambda: n_deltas(server, rid) >= 100, timeout=60)
    assert all(f.thread.is_alive() for f in followers)
    client.responses.cancel(rid)

    replay = full_replay(server, rid)
    raws = [f.result() for f in followers]
    assert all(strip_keepalives(r) == replay for r in raws)
    assert len({strip_keepalives(r) for r in raws}) == 1
    sdk.join(timeout=10)
    assert not sdk.is_alive()
    assert [e.type for e in events] == [f.event for f in parse_frames(replay)]
    assert events[-1].response.status == "cancelled"
    assert server.state.engine.generations == generations + 1
    final = json.loads(read_log(server, rid)[-1].data)["response"]
    assert final["status"] == "cancelled"
