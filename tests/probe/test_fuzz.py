"""Every endpoint, fuzzed through a real server: no request gets a 5xx, a malformed error, a
stream that never ends or no answer; afterwards the server is healthy and its log sound."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni.service.defaults import Defaults
from tests.probe.fuzz import Probe, requests
from tests.server import running

EXAMPLES = int(os.environ.get("OMNI_FUZZ_EXAMPLES", "250"))


class Fuzzed:
    def __init__(self, srv: Any, db: Path, known: list[str]) -> None:
        self.srv, self.db, self.known = srv, db, known
        self.probe = Probe(httpx.Client(base_url=srv.base_url, timeout=60))


def known_ids(client: Any, base_url: str) -> list[str]:
    """One object of every kind and state, so that ids cross endpoints."""
    stored = client.responses.create(model="tiny-llama", input="hi", max_output_tokens=2)
    unstored = client.responses.create(
        model="tiny-llama", input="hi", max_output_tokens=2, store=False
    )
    background = client.responses.create(
        model="tiny-llama", input="hi", max_output_tokens=2, background=True
    )
    deleted = client.responses.create(model="tiny-llama", input="hi", max_output_tokens=2)
    client.responses.delete(deleted.id)
    chat = [
        client.chat.completions.create(
            model="tiny-llama",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            store=store,
        ).id
        for store in (True, False)
    ]
    legacy = client.completions.create(model="tiny-llama", prompt="hi", max_tokens=2).id
    message = httpx.post(
        f"{base_url}/v1/messages",
        json={
            "model": "tiny-llama",
            "max_tokens": 2,
            "messages": [{"role": "user", "content": "hi"}],
        },
        timeout=60,
    ).json()["id"]
    return [stored.id, unstored.id, background.id, deleted.id, *chat, legacy, message]


@pytest.fixture(scope="module")
def fuzzed(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    db = tmp_path_factory.mktemp("fuzz") / "omni.db"
    with running(tiny_engine, db, defaults=Defaults(max_tokens=4)) as (srv, client):
        known = [] if os.environ.get("FUZZ_NO_KNOWN") else known_ids(client, srv.base_url)
        target = Fuzzed(srv, db, known)
        yield target
        target.probe.client.close()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_no_request_breaks_the_server(fuzzed: Fuzzed, data: st.DataObject) -> None:
    request = data.draw(requests(fuzzed.known))
    problem = fuzzed.probe.send(request)
    assert problem is None, f"{request!r}: {problem}"


def test_afterwards_the_server_is_healthy_and_the_log_sound(fuzzed: Fuzzed) -> None:
    assert fuzzed.probe.tally["requests"] >= EXAMPLES
    assert httpx.get(f"{fuzzed.srv.base_url}/health", timeout=30).status_code == 200
    with sqlite3.connect(fuzzed.db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        gaps = conn.execute(
            "SELECT stream_id FROM events GROUP BY stream_id"
            " HAVING MIN(seq) != 0 OR MAX(seq) + 1 != COUNT(*)"
        ).fetchall()
    assert gaps == []
