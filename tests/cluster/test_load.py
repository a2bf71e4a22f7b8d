"""64 clients at once through the balancer, each making 10 requests (streamed, background then
followed, cut off then resumed): no request fails, and every client read exactly the events
the log holds, contiguous, each once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable

import httpx

from tests.api._helpers import parse_frames, strip_keepalives
from tests.cluster.conftest import MODEL, Cluster, whole_frames
from tests.postgres import rows

# Nobody dies here: the default lease, which a busy replica renews in time (two, on two
# loaded cores, may lapse: tests/events/test_postgres_store.py says what happens then).
LEASE_S = 10
CLIENTS = 64
REQUESTS = 10
ENDED_WELL = ("response.completed", "response.incomplete")  # no failure among them
Read = tuple[str, bytes, str]  # a response's id, the events its client read, who served it


def body(client: int, n: int, **extra: object) -> dict[str, object]:
    return {
        "model": MODEL,
        "input": f"client {client} asks question {n}",
        "max_output_tokens": 12,
        **extra,
    }


def upstream(response: httpx.Response) -> str:
    return response.headers["x-omni-upstream"]


async def streamed(http: httpx.AsyncClient, client: int, n: int) -> Read:
    async with http.stream("POST", "/v1/responses", json=body(client, n, stream=True)) as live:
        assert live.status_code == 200
        read = strip_keepalives(b"".join([chunk async for chunk in live.aiter_bytes()]))
    return parse_frames(read)[0].data["response"]["id"], read, upstream(live)


async def background(http: httpx.AsyncClient, client: int, n: int) -> Read:
    made = await http.post("/v1/responses", json=body(client, n, background=True))
    assert made.status_code == 200, made.text
    rid = made.json()["id"]
    followed = await http.get(f"/v1/responses/{rid}?stream=true")
    assert followed.status_code == 200, followed.text
    return rid, strip_keepalives(followed.content), upstream(made)


async def resumed(http: httpx.AsyncClient, client: int, n: int) -> Read:
    """Cut after three events (a background stream goes on), resumed by Last-Event-ID."""
    request = body(client, n, stream=True, background=True)
    async with http.stream("POST", "/v1/responses", json=request) as live:
        assert live.status_code == 200
        seen = b""
        async for chunk in live.aiter_bytes():
            seen += chunk
            if strip_keepalives(seen).count(b"\n\n") >= 3:
                break
    head = whole_frames(seen)
    frames = parse_frames(head)
    rid = frames[0].data["response"]["id"]
    headers = {"Last-Event-ID": str(frames[-1].seq)}
    tail = await http.get(f"/v1/responses/{rid}?stream=true", headers=headers)
    assert tail.status_code == 200, tail.text
    return rid, head + strip_keepalives(tail.content), upstream(live)


KINDS: tuple[Callable[[httpx.AsyncClient, int, int], Awaitable[Read]], ...] = (
    streamed,
    background,
    resumed,
)


async def one_client(balancer: str, client: int) -> list[Read]:
    async with httpx.AsyncClient(base_url=balancer, timeout=120) as http:
        return [await KINDS[(client + n) % len(KINDS)](http, client, n) for n in range(REQUESTS)]


async def test_64_clients_over_two_replicas_lose_nothing(cluster: Cluster) -> None:
    results = await asyncio.gather(
        *(one_client(cluster.balancer, c) for c in range(CLIENTS)), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    reads = [read for client in results for read in client]  # type: ignore[union-attr]
    assert len(reads) == CLIENTS * REQUESTS

    logged: dict[str, list[tuple[int, str, str]]] = {}
    for stream_id, seq, type_, data in rows(
        cluster.db,
        "SELECT stream_id, seq, type, data FROM events WHERE stream_id = ANY(%s)"
        " ORDER BY stream_id, seq",
        [rid for rid, _, _ in reads],
    ):
        logged.setdefault(stream_id, []).append((seq, type_, data))
    assert len(logged) == len(reads)  # every response its own stream
    for rid, read, _ in reads:
        events = logged[rid]
        assert [seq for seq, _, _ in events] == list(range(len(events))), rid
        assert events[-1][1] in ENDED_WELL, (rid, events[-1])
        expected = b"".join(f"event: {t}\ndata: {d}\nid: {s}\n\n".encode() for s, t, d in events)
        assert read == expected, rid  # what the client read: the log, each event once
    served = Counter(replica for _, _, replica in reads)
    assert len(served) == 2 and min(served.values()) >= len(reads) // 4, served
