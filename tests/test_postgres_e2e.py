"""`omni serve --db postgresql://…` as a user runs it: a real process on a fresh PostgreSQL
database (the schema made on start), driven by the OpenAI SDK, then read by `omni ls`,
`omni show` and `omni db check`; a second server of one replica id is refused."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from omni.lock import PostgresLock
from tests.api._helpers import parse_frames
from tests.postgres import database, rows
from tests.test_cli import omni, serving

MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def pg_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    log = tmp_path_factory.mktemp("pg-e2e") / "serve.log"
    with database("omni_e2e") as url, serving(tiny_model_dir, url, "info", log) as (base, proc):  # type: ignore[arg-type]
        yield url, base, proc, log


def _sdk(base: str) -> OpenAI:
    return OpenAI(
        base_url=f"{base}/v1", api_key="test", max_retries=0, _strict_response_validation=True
    )


def test_the_responses_api_on_postgresql(pg_server: tuple) -> None:
    url, base, _, log = pg_server
    assert "log: postgresql" in log.read_text()  # the start names the log it serves
    with _sdk(base) as client:
        plain = client.responses.create(model=MODEL, input="Hello there", max_output_tokens=8)
        assert plain.status in ("completed", "incomplete")
        events = list(
            client.responses.create(
                model=MODEL, input="Stream me", max_output_tokens=8, stream=True
            )
        )
        final = events[-1].response  # type: ignore[union-attr]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        got = client.responses.retrieve(final.id)
        assert got.output_text == final.output_text and got.status == final.status
        items = client.responses.input_items.list(final.id)
        assert [i.type for i in items.data] == ["message"]
        chained = client.responses.create(
            model=MODEL, input="And then?", previous_response_id=plain.id, max_output_tokens=4
        )
        assert chained.previous_response_id == plain.id

    # A replay is the stream byte for byte; resumed after any seq, its tail exactly.
    stream = f"{base}/v1/responses/{final.id}?stream=true"
    whole = httpx.get(stream, timeout=30).content
    frames = parse_frames(whole)
    assert [f.seq for f in frames] == list(range(len(events)))
    cut = len(frames) // 2
    rest = httpx.get(f"{stream}&starting_after={frames[cut].seq}", timeout=30).content
    assert rest == b"".join(f.raw for f in frames[cut + 1 :])

    # The log is in the database: contiguous, one row per event the client saw.
    seqs = rows(url, "SELECT seq FROM events WHERE stream_id = %s ORDER BY position", final.id)
    assert [s for (s,) in seqs] == list(range(len(events)))


def test_a_chat_completion_is_replayed_from_the_cache(pg_server: tuple) -> None:
    _, base, _, _ = pg_server
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "same question"}],
        "max_tokens": 6,
        "temperature": 0,
        "store": True,
    }
    with httpx.Client(base_url=base, timeout=60) as http:
        first = http.post("/v1/chat/completions", json=body)
        second = http.post("/v1/chat/completions", json=body)
    assert first.status_code == second.status_code == 200
    assert first.headers["x-omni-cache"] == "miss" and second.headers["x-omni-cache"] == "hit"
    a, b = first.json(), second.json()
    assert a["id"] != b["id"]
    assert a["choices"][0]["message"] == b["choices"][0]["message"]


def test_a_message_is_replayed_from_the_cache_and_read_back(pg_server: tuple) -> None:
    """Anthropic's Messages on PostgreSQL: the index's trigger (0012) makes the twin a hit;
    the `messages` view and `omni show` read it."""
    url, base, _, _ = pg_server
    body = {
        "model": MODEL,
        "max_tokens": 6,
        "temperature": 0,
        "messages": [{"role": "user", "content": "same message"}],
    }
    with httpx.Client(base_url=base, timeout=60) as http:
        first, second = (http.post("/v1/messages", json=body) for _ in range(2))
    assert first.status_code == second.status_code == 200, second.text
    assert first.headers["x-omni-cache"] == "miss" and second.headers["x-omni-cache"] == "hit"
    a, b = first.json(), second.json()
    assert a["id"] != b["id"] and a["content"] == b["content"]
    assert rows(url, "SELECT completion_id FROM chat_cache WHERE completion_id = %s", a["id"])
    viewed = rows(
        url,
        "SELECT id, status, source, output_tokens FROM messages WHERE id IN (%s, %s)"
        " ORDER BY created_ms",
        a["id"],
        b["id"],
    )
    tokens = a["usage"]["output_tokens"]
    assert viewed == [
        (a["id"], "completed", "generated", tokens),
        (b["id"], "completed", "cache", tokens),
    ]
    shown = omni("show", b["id"], "--db", url, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["replay_of"] == a["id"]


def test_omni_ls_show_and_check_read_the_database(pg_server: tuple) -> None:
    url, base, _, _ = pg_server
    with _sdk(base) as client:
        made = client.responses.create(model=MODEL, input="list me", max_output_tokens=4)
    listed = omni("ls", "--db", url, "--limit", "50")
    assert listed.returncode == 0, listed.stderr
    assert made.id in listed.stdout
    shown = omni("show", made.id, "--db", url, "--json", "--events")
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["summary"]["id"] == made.id and detail["summary"]["status"] == made.status
    assert detail["output_text"] == made.output_text
    assert [e["seq"] for e in detail["events"]] == list(range(len(detail["events"])))
    stats = omni("stats", "--db", url, "--json")
    assert stats.returncode == 0 and json.loads(stats.stdout)["total"] >= 1, stats.stderr
    checked = omni("db", "check", "--db", url)
    assert checked.returncode == 0 and "is sound" in checked.stdout, checked.stdout


def test_a_second_server_of_one_replica_id_is_refused(
    pg_server: tuple, tiny_model_dir: Path
) -> None:
    """Replicas share the database, each under its own id; one id serves once."""
    url, _, proc, _ = pg_server
    held = PostgresLock.acquire(url, "twin")  # as a live `omni serve --replica-id twin` holds it
    try:
        args = ("serve", "--model", str(tiny_model_dir), "--db", url, "--port", "1")
        second = omni(*args, "--replica-id", "twin")
    finally:
        held.release()
    assert second.returncode == 1, second.stderr
    errors = [line for line in second.stderr.splitlines() if line.startswith("omni: error:")]
    assert len(errors) == 1 and "replica 'twin' already serves" in errors[0], second.stderr
    assert proc.poll() is None  # the first one serves on


def test_a_backup_names_pg_dump(pg_server: tuple) -> None:
    url, *_ = pg_server
    result = omni("db", "backup", "/nowhere/copy.db", "--db", url)
    assert result.returncode == 1 and "pg_dump" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_stop_leaves_a_sound_log(pg_server: tuple) -> None:
    url, _, proc, _ = pg_server
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    checked = omni("db", "check", "--db", url)
    assert checked.returncode == 0 and "is sound" in checked.stdout, checked.stdout
    # Nothing is left holding the database: the stopped server's sessions are gone.
    (left,) = rows(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid != pg_backend_pid()",
    )
    assert left == (0,)
