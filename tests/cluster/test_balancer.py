"""Two replicas behind nginx act as one server: a stream resumes on whichever replica the
balancer picks, byte for byte; a cancel reaches the replica that runs the response; identical
deterministic chat requests to both generate once. Then 64 clients at once, each making
requests of every kind (streamed, background then followed, cut off then resumed): no request
fails, and every client read exactly the events the log holds, contiguous, each once. The
tests share one cluster (its start-up is most of their time)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Awaitable, Callable

import httpx

from tests.api._helpers import TERMINAL, UNENDING, parse_frames, strip_keepalives
from tests.cluster.conftest import MODEL, Cluster, data_of, whole_frames
from tests.postgres import rows

# Nobody dies here: the default lease, which a busy replica renews in time (two, on two
# loaded cores, may lapse: tests/events/test_postgres_store.py says what happens then).
LEASE_S = 10
CLIENTS = 64
REQUESTS = 4  # each client sends every kind at least once
ENDED_WELL = ("response.completed", "response.incomplete")  # no failure among them
Read = tuple[str, bytes, str]  # a response's id, the events its client read, who served it


def test_a_stream_cut_off_resumes_through_the_other_replica(cluster: Cluster) -> None:
    body = {
        "model": MODEL,
        "input": "resume me elsewhere",
        "max_output_tokens": 400,
        "temperature": 0,
        "stream": True,
        "background": True,  # a cut stream goes on generating
    }
    with httpx.Client(base_url=cluster.balancer, timeout=60) as http:
        with http.stream("POST", "/v1/responses", json=body) as live:
            assert live.status_code == 200
            creator = cluster.serving(live)
            seen = b""
            for chunk in live.iter_bytes():
                seen += chunk
                if strip_keepalives(seen).count(b"\n\n") >= 6:
                    break  # cut: the connection closes
        head = parse_frames(whole_frames(seen))
        response_id = head[0].data["response"]["id"]
        last = head[-1].seq
        # Round robin: the first resume lands on the other replica, the second on the creator.
        by_header = http.get(
            f"/v1/responses/{response_id}?stream=true", headers={"Last-Event-ID": str(last)}
        )
        by_query = http.get(f"/v1/responses/{response_id}?stream=true&starting_after={last}")
    assert cluster.serving(by_header) is not creator
    assert cluster.serving(by_query) is creator

    # Each replica replays the whole stream as the log holds it: nothing in it names a replica.
    whole = {
        name: httpx.get(f"{r.base}/v1/responses/{response_id}?stream=true", timeout=60).content
        for name, r in cluster.replicas.items()
    }
    assert whole["a"] == whole["b"] == cluster.sse(response_id)
    frames = parse_frames(whole["a"])
    assert frames[-1].event in TERMINAL
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert [f.raw for f in head] == [f.raw for f in frames[: len(head)]]
    tail = b"".join(f.raw for f in frames[len(head) :])
    assert strip_keepalives(by_header.content) == tail
    assert strip_keepalives(by_query.content) == tail


def test_a_cancel_sent_to_b_stops_a_run_on_a(cluster: Cluster) -> None:
    a, b = cluster.replicas["a"], cluster.replicas["b"]
    limit = 4000
    with cluster.sdk(a.base) as on_a, cluster.sdk(b.base) as on_b:
        made = on_a.responses.create(
            model=MODEL,
            input="cancel me from afar",
            background=True,
            max_output_tokens=limit,
            extra_body=UNENDING,  # still generating when B's cancel reaches A
        )
        cluster.wait_for_deltas(made.id, 5)  # generating on A
        cancelled = on_b.responses.cancel(made.id)
    assert cancelled.status == "cancelled"
    assert cancelled.usage is not None and 5 <= cancelled.usage.output_tokens < limit

    events = cluster.events(made.id)
    assert [seq for _, seq, _, _ in events] == list(range(len(events)))
    position, _, type_, _ = events[-1]  # the only ending, and nothing after it
    assert type_ == "response.incomplete"
    assert data_of(events[-1])["response"]["status"] == "cancelled"
    assert [t for _, _, t, _ in events].count("response.incomplete") == 1
    facts = cluster.events(f"{made.id}/request")
    (fact,) = [f for f in facts if f[2] == "omni.response.cancel_requested"]
    assert fact[0] < position  # B's fact, then A's ending
    text = "".join(data_of(e)["delta"] for e in events if e[2] == "response.output_text.delta")
    assert cancelled.output_text == text != ""


def test_identical_chat_requests_to_both_replicas_generate_once(cluster: Cluster) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "the same question, twice at once"}],
        "max_tokens": 600,  # long enough that the twins meet while it generates
        "temperature": 0,
        "store": True,
    }
    start = threading.Barrier(2)
    answers: list[httpx.Response] = []

    def ask() -> None:
        with httpx.Client(base_url=cluster.balancer, timeout=120) as http:
            start.wait()
            answers.append(http.post("/v1/chat/completions", json=body))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
    assert {cluster.serving(r).name for r in answers} == {"a", "b"}  # one to each replica
    assert sorted(r.headers["x-omni-cache"] for r in answers) == ["hit", "miss"]
    first, second = (r.json() for r in answers)
    assert first["id"] != second["id"]
    assert first["choices"][0]["message"] == second["choices"][0]["message"]

    # One generation in the log: the other answer's request names it as what it copies.
    requests = {}
    for r in answers:
        cid = r.json()["id"]
        (accepted,) = cluster.events(f"{cid}/request")[:1]
        requests[cid] = json.loads(accepted[3])
    (original,) = [cid for cid, req in requests.items() if "mirror_of" not in req]
    (copy,) = [cid for cid, req in requests.items() if "mirror_of" in req]
    assert requests[copy]["mirror_of"] == original


def asking(client: int, n: int, **extra: object) -> dict[str, object]:
    return {
        "model": MODEL,
        "input": f"client {client} asks question {n}",
        "max_output_tokens": 12,
        **extra,
    }


def upstream(response: httpx.Response) -> str:
    return response.headers["x-omni-upstream"]


async def streamed(http: httpx.AsyncClient, client: int, n: int) -> Read:
    async with http.stream("POST", "/v1/responses", json=asking(client, n, stream=True)) as live:
        assert live.status_code == 200
        read = strip_keepalives(b"".join([chunk async for chunk in live.aiter_bytes()]))
    return parse_frames(read)[0].data["response"]["id"], read, upstream(live)


async def background(http: httpx.AsyncClient, client: int, n: int) -> Read:
    made = await http.post("/v1/responses", json=asking(client, n, background=True))
    assert made.status_code == 200, made.text
    rid = made.json()["id"]
    followed = await http.get(f"/v1/responses/{rid}?stream=true")
    assert followed.status_code == 200, followed.text
    return rid, strip_keepalives(followed.content), upstream(made)


async def resumed(http: httpx.AsyncClient, client: int, n: int) -> Read:
    """Cut after three events (a background stream goes on), resumed by Last-Event-ID."""
    request = asking(client, n, stream=True, background=True)
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
