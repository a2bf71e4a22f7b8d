"""A replica killed mid-generation (`kill -9`): once its leases expire the other replica takes
its work. Its background response goes on from the recorded tokens, token-exactly, keeping all
that was committed; its foreground one ends `failed`, as after a restart."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import httpx

from tests.api._helpers import TERMINAL, UNENDING, parse_frames, strip_keepalives
from tests.cluster.conftest import DELTA, MODEL, Cluster, data_of

GREEDY = {"model": MODEL, "input": "carry on where it stopped", "temperature": 0}
LIMIT = 400  # still generating when killed (after 20 deltas), short enough to run twice more


def follow(base: str, response_id: str) -> list[Any]:
    """A response's stream from one replica, to its ending."""
    body = httpx.get(f"{base}/v1/responses/{response_id}?stream=true", timeout=120).content
    frames = parse_frames(strip_keepalives(body))
    assert frames and frames[-1].event in TERMINAL, body[-300:]
    return frames


def text_of(rows: list[tuple[int, int, str, str]]) -> str:
    return "".join(data_of(r)["delta"] for r in rows if r[2] == DELTA)


def test_a_killed_replicas_work_is_taken_over(cluster: Cluster) -> None:
    a, b = cluster.replicas["a"], cluster.replicas["b"]
    # Unending: still generating when A is killed, so it is left for B to end.
    foreground = {"model": MODEL, "input": "cut me off", "max_output_tokens": 100000, **UNENDING}
    with (
        httpx.Client(base_url=a.base, timeout=60) as http,
        http.stream("POST", "/v1/responses", json={**foreground, "stream": True}) as live,
    ):
        lines = live.iter_lines()
        created = next(line for line in lines if line.startswith("data: "))
        cut = json.loads(created.removeprefix("data: "))["response"]["id"]
        background = http.post(
            "/v1/responses", json={**GREEDY, "max_output_tokens": LIMIT, "background": True}
        ).json()["id"]
        cluster.wait_for_deltas(background, 20)
        cluster.wait_for_deltas(cut, 1)
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait()
        try:
            for _ in lines:  # the foreground client's connection goes with A
                pass
        except httpx.HTTPError:
            pass
    committed = cluster.events(background)  # all A committed (and maybe some of B's already)
    assert len(committed) > 20 and committed[-1][2] not in TERMINAL

    # B takes the background response over and finishes it, after what A recorded; the
    # balancer sends every request to B now.
    frames = follow(cluster.balancer, background)
    rows = cluster.events(background)
    assert [seq for _, seq, _, _ in rows] == list(range(len(rows)))
    assert rows[: len(committed)] == committed
    assert b"".join(f.raw for f in frames) == cluster.sse(background)
    assert [t for _, _, t, _ in rows if t in TERMINAL] == [rows[-1][2]]
    continued = data_of(rows[-1])["response"]
    assert continued["status"] in ("completed", "incomplete")
    assert "taking over" in b.log.read_text()

    # Greedy: the text is the uninterrupted run's, token for token.
    with cluster.sdk(b.base) as client:
        uninterrupted = client.responses.create(**GREEDY, max_output_tokens=LIMIT)
    assert text_of(rows) == uninterrupted.output_text
    assert continued["usage"]["output_tokens"] == uninterrupted.usage.output_tokens  # type: ignore[union-attr]

    # The foreground response lost its client with A: B ends it failed.
    ended = follow(cluster.balancer, cut)
    assert ended[-1].event == "response.failed"
    assert [f.seq for f in ended] == list(range(len(ended)))
    failed = httpx.get(f"{b.base}/v1/responses/{cut}", timeout=60).json()
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
