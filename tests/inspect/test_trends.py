"""The dashboard's buckets over `summaries` rows of known times, on a real SQLite file and on
the real PostgreSQL: the same rows give the same figures, through each dialect's SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import Connection

from omni.db import upgrade
from omni.inspect import open_log
from omni.inspect.trends import Span, Trends
from tests.postgres import database

NOW = 1_800_000_000_000  # a multiple of a minute
START = NOW - 900_000  # of a 15-minute window in steps of 60 s
COLUMNS = (
    "id, kind, position, created_at, created, owner, model, status, first_token_at,"
    " finished_at, input_tokens, output_tokens"
)


def _row(n: int, at: int, first: int | None, end: int | None, tokens: tuple[Any, Any],
         status: str = "completed", owner: str = "alice", model: str = "a",
         kind: str = "response") -> tuple[Any, ...]:  # fmt: skip
    return (f"r{n}", kind, n, at, "-", owner, model, status, first, end, *tokens)


ROWS = [
    # bucket 0: arrives, first token after 500 ms, ends at 12 s: 10 tokens in 1.5 s
    _row(1, START + 10_000, START + 10_500, START + 12_000, (100, 11)),
    _row(2, START + 20_000, None, START + 21_000, (50, None), "failed", "bob", "b"),
    # arrives in bucket 1, ends in bucket 2: 20 tokens in 68 s
    _row(3, START + 61_000, START + 62_000, START + 130_000, (10, 21)),
    # created before the window, ends in bucket 0: it counts where it ended
    _row(4, START - 5_000, START + 1_000, START + 5_000, (7, 3)),
    _row(5, START + 30_000, None, None, (None, None), "completed", kind="conversation"),
    _row(6, NOW + 5_000, None, None, (None, None), "queued"),  # after now: not yet
]


@pytest.fixture(params=["sqlite", "postgresql"])
def conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connection]:
    marks = ", ".join("?" * 12)
    if request.param == "sqlite":
        path = str(tmp_path / "omni.db")
        upgrade(path)
        with sqlite3.connect(path) as db:
            db.executemany(f"INSERT INTO summaries ({COLUMNS}) VALUES ({marks})", ROWS)
        with open_log(path).connect() as c:
            yield c
        return
    with database("omni_trends") as url:
        upgrade(url)
        with psycopg.connect(url) as pg, pg.cursor() as cur:
            cur.executemany(
                f"INSERT INTO summaries ({COLUMNS}) VALUES ({marks.replace('?', '%s')})", ROWS
            )
        engine = open_log(url)
        with engine.connect() as c:
            yield c
        engine.dispose()


def test_a_span_starts_on_a_step_and_ends_now() -> None:
    span = Span.ending(NOW + 25_000, 900, 60)
    assert (span.start_ms, span.end_ms, span.buckets) == (START, NOW + 25_001, 16)
    assert Span.ending(NOW, 900, 60).buckets == 16  # the last, begun at now, holds now


def test_rows_fall_in_their_buckets(conn: Connection) -> None:
    trend = Trends(conn).read(Span.ending(NOW, 900, 60))
    s = trend.series
    assert s["requests_per_min"][:3] == [2.0, 1.0, 0.0]  # arrivals: r1 r2 | r3
    assert sum(s["requests_per_min"]) == 3.0  # not the conversation, not what comes after now
    assert s["errors_per_min"][:3] == [1.0, 0.0, 0.0]
    assert s["input_tokens_per_s"][:3] == [(100 + 50 + 7) / 60, 0.0, 10 / 60]
    assert s["output_tokens_per_s"][:3] == [(11 + 3) / 60, 0.0, 21 / 60]
    assert s["ttft_ms_p50"][:3] == [500.0, None, 1000.0]  # r1's 500 ms, r4's 6 s
    assert s["ttft_ms_p95"][:3] == [6000.0, None, 1000.0]
    assert s["decode_tokens_per_s_p50"][:3] == [0.5, None, 0.3]  # r4: 2 tokens in 4 s
    assert s["decode_tokens_per_s_p95"][:3] == [6.7, None, 0.3]
    assert all(v is None for v in s["ttft_ms_p50"][3:])
    assert (trend.models, trend.owners) == (["a", "b"], ["alice", "bob"])
    body = trend.to_json()
    assert body["time"][:2] == [START // 1000, START // 1000 + 60] and body["step_s"] == 60
    assert all(len(body[name]) == 16 for name in s)


def test_filters_keep_to_a_model_and_a_key(conn: Connection) -> None:
    span = Span.ending(NOW, 900, 60)
    alice = Trends(conn).read(span, scope="alice")
    assert alice.series["requests_per_min"][:2] == [1.0, 1.0]
    assert sum(alice.series["errors_per_min"]) == 0.0  # bob's failure is not hers
    assert (alice.models, alice.owners) == (["a"], ["alice"])  # nor his model, nor his name
    assert Trends(conn).read(span, owner="bob", scope="alice").series == alice.series
    chosen = Trends(conn).read(span, owner="alice")  # one key chosen among all
    assert chosen.series == alice.series and chosen.owners == ["alice", "bob"]
    model_b = Trends(conn).read(span, model="b")
    assert model_b.series["requests_per_min"][:2] == [1.0, 0.0]
    assert model_b.series["input_tokens_per_s"][0] == 50 / 60


def test_a_wider_step_sums_its_rows(conn: Connection) -> None:
    trend = Trends(conn).read(Span.ending(NOW, 900, 300))
    assert trend.series["requests_per_min"][0] == 3 * 60 / 300
    assert trend.series["output_tokens_per_s"][0] == (11 + 3 + 21) / 300
    assert trend.series["ttft_ms_p95"][0] == 6000.0
