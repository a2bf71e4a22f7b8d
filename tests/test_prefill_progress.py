"""A long prefill says how far it got, on real MLX: each chunk fed is recorded on the
response's progress stream before its first token, the inspector's API and `omni tail` show it,
/metrics counts the tokens of prompts being prefilled, and an unstored response leaves none."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from omni.api.app import Settings
from omni.metrics import Metrics
from tests.conftest import TINY_ID
from tests.server import ServerThread
from tests.test_cli import omni

LONG = "The keeper writes down the weather, the wind and every ship. " * 40


@pytest.fixture(scope="module")
def served(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    db = tmp_path_factory.mktemp("progress") / "omni.db"
    srv = ServerThread(Settings(db_path=str(db)), tiny_engine).start()
    yield srv, db
    srv.stop()


def positions(db: Path, stream: str) -> list[tuple[int, str, dict[str, Any]]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT position, type, data FROM events WHERE stream_id = ? ORDER BY seq", (stream,)
        ).fetchall()
    return [(p, t, json.loads(d)) for p, t, d in rows]


def test_each_chunk_is_recorded_before_the_first_token(served: Any) -> None:
    srv, db = served
    client = OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0)
    made = client.responses.create(model=TINY_ID, input="Chunks. " + LONG, max_output_tokens=3)
    assert made.usage is not None
    progress = positions(db, f"{made.id}/progress")
    said = [d for _, t, d in progress if t == "omni.prefill.progress"]
    assert len(said) == len(progress) >= 2  # a prompt of several chunks
    fed = [d["fed"] for d in said]
    assert fed == sorted(fed) and len(set(fed)) == len(fed)
    assert {d["total"] for d in said} == {made.usage.input_tokens}
    assert fed[-1] < made.usage.input_tokens  # its last tokens are fed as it starts
    first_delta = next(p for p, t, _ in positions(db, made.id) if t.endswith("text.delta"))
    assert progress[-1][0] < first_delta
    with httpx.Client(base_url=srv.base_url, timeout=30) as http:
        assert http.get(f"/inspect/api/{made.id}/progress").json() == said[-1]
        assert http.get("/inspect/api/resp_nothing/progress").status_code == 404
        short = client.responses.create(model=TINY_ID, input="Hi", max_output_tokens=1)
        assert http.get(f"/inspect/api/{short.id}/progress").json() == {
            "fed": None, "total": None}  # fmt: skip
    tailed = omni("tail", made.id, "--db", str(db))
    assert tailed.returncode == 0
    assert tailed.stdout.count("omni.prefill.progress") == len(said)


def test_an_unstored_response_leaves_no_progress(served: Any) -> None:
    srv, db = served
    client = OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0)
    made = client.responses.create(model=TINY_ID, input=LONG, max_output_tokens=2, store=False)
    with sqlite3.connect(db) as conn:  # purged once its reader is done: wait for that
        for _ in range(600):
            left = conn.execute(
                "SELECT count(*) FROM events WHERE stream_id LIKE ?", (f"{made.id}%",)
            ).fetchone()[0]
            if not left:
                break
            time.sleep(0.05)
    assert not left


def test_metrics_sum_the_prompts_being_prefilled() -> None:
    metrics = Metrics()

    def shown() -> dict[tuple[str, str], float]:
        samples = metrics.prefill.collect()[0].samples
        return {(s.labels["model"], s.labels["state"]): s.value for s in samples}

    metrics.prefilling("resp_a", "m", 128, 1000)
    metrics.prefilling("resp_b", "m", 256, 500)
    assert shown() == {("m", "fed"): 384, ("m", "total"): 1500}
    metrics.prefilling("resp_a", "m", None)
    assert shown() == {("m", "fed"): 256, ("m", "total"): 500}
    metrics.prefilling("resp_b", "m", None)
    assert shown() == {("m", "fed"): 0, ("m", "total"): 0}


def test_tail_summary_says_a_line_a_stream_not_an_event(served: Any) -> None:
    srv, db = served
    client = OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0)
    # Its own text: a prompt the prefix cache holds would not be prefilled in chunks.
    made = client.responses.create(model=TINY_ID, input="Summary. " + LONG, max_output_tokens=6)
    tailed = omni("tail", made.id, "--summary", "--db", str(db))
    assert tailed.returncode == 0
    lines = tailed.stdout.splitlines()
    by_stream = {line.split()[1]: line for line in lines}
    assert len(lines) == len(by_stream) == 3, lines  # the response, its request, its progress
    events = positions(db, made.id)
    deltas = sum(t == "response.output_text.delta" for _, t, _ in events)
    said = by_stream[made.id]
    assert f"{len(events)} events, {deltas} deltas" in said
    assert said.endswith(f"last {events[-1][1]}")
    fed = positions(db, f"{made.id}/progress")[-1][2]
    assert f"prefill {fed['fed']}/{fed['total']} tokens fed" in by_stream[f"{made.id}/progress"]
