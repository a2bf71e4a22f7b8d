"""Two replicas behind nginx act as one server: a stream resumes on whichever replica the
balancer picks, byte for byte; a cancel reaches the replica that runs the response; identical
deterministic chat requests to both generate once."""

from __future__ import annotations

import json
import threading

import httpx

from tests.api._helpers import TERMINAL, UNENDING, parse_frames, strip_keepalives
from tests.cluster.conftest import MODEL, Cluster, data_of, whole_frames


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
