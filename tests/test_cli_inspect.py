"""`omni ls | show | tail | replay | stats` as a person runs them, in a subprocess, on the log
of a real `omni serve`: while it runs, after it stopped, and after a `kill -9`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from alembic import command

from omni.db import alembic_config
from omni.vocabulary import RESPONSE_ENDS
from tests.api._helpers import UNENDING
from tests.api.test_tool_calls_scripted import WEATHER, ScriptedEngine
from tests.inspect._chain import LONG, make_chain
from tests.server import running
from tests.test_cli import assert_one_line_error, kill_mid_stream, omni, serving

MODEL = "tiny-llama"


def strip(raw: bytes) -> bytes:
    return raw.replace(b": keep-alive\n", b"")


def streamed(base: str, path: str, body: dict[str, object]) -> bytes:
    with httpx.stream("POST", f"{base}{path}", json={**body, "stream": True}, timeout=60) as res:
        assert res.status_code == 200
        return strip(b"".join(res.iter_bytes()))


def first_id(raw: bytes) -> str:
    data = next(line for line in raw.split(b"\n") if line.startswith(b"data: "))
    doc = json.loads(data[6:])
    return str(doc["response"]["id"] if "response" in doc else doc["id"])


@dataclass
class Served:
    base: str
    db: Path
    response: bytes  # a streamed response's bytes
    chat: bytes  # a streamed chat completion's (usage asked for)
    chat_plain: bytes  # one streamed without asking for usage
    plain: dict[str, object]  # a non-streamed response's body


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = tmp_path_factory.mktemp("served") / "omni.db"
    with serving(tiny_model_dir, db) as (base, _):
        response = streamed(
            base, "/v1/responses", {"model": MODEL, "input": "Hi there", "max_output_tokens": 24}
        )
        messages = [{"role": "user", "content": "Say hi"}]
        chat = {"model": MODEL, "messages": messages, "max_tokens": 6, "store": True}
        usage = {**chat, "stream_options": {"include_usage": True}}
        chat_usage = streamed(base, "/v1/chat/completions", usage)
        chat_plain = streamed(base, "/v1/chat/completions", chat)
        body = {"model": MODEL, "input": "Plain one", "max_output_tokens": 5}
        plain = httpx.post(f"{base}/v1/responses", json=body, timeout=60).json()
        yield Served(base, db, response, chat_usage, chat_plain, plain)


def test_ls_lists_what_was_made_newest_first(served: Served) -> None:
    result = omni("ls", "--db", str(served.db))
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout  # piped: plain text, no colours
    header, *lines = result.stdout.splitlines()
    assert header.split("\t") == ["ID", "CREATED", "STATUS", "OWNER", "MODEL", "TOKENS", "TTFT",
                                  "TOK/S", "PREVIEW"]  # fmt: skip
    ids = [line.split("\t")[0] for line in lines]
    made = [first_id(served.response), first_id(served.chat), first_id(served.chat_plain)]
    assert ids == [served.plain["id"], *reversed(made)]
    plain = lines[0].split("\t")
    usage = served.plain["usage"]
    assert isinstance(usage, dict)
    assert plain[2] == served.plain["status"] == "incomplete"
    assert plain[5] == f"{usage['input_tokens']}→{usage['output_tokens']}"
    one = omni("ls", "--db", str(served.db), "--limit", "1", "--status", "completed")
    assert [line.split("\t")[2] for line in one.stdout.splitlines()[1:]] == ["completed"]
    assert omni("ls", "--db", str(served.db), "--since", "1h").stdout == result.stdout
    bad = omni("ls", "--db", str(served.db), "--since", "soon")
    assert bad.returncode == 2 and "expected a duration" in bad.stderr
    typo = omni("ls", "--db", str(served.db), "--status", "complete")
    assert typo.returncode == 2 and "choose from 'queued'" in typo.stderr


def test_ls_filters_searches_and_sorts(served: Served) -> None:
    def ids(*asked: str) -> list[str]:
        result = omni("ls", "--db", str(served.db), *asked)
        assert result.returncode == 0, result.stderr
        return [line.split("\t")[0] for line in result.stdout.splitlines()[1:]]

    newest = ids()
    assert ids("-q", "plain") == [served.plain["id"]]  # a word of its input
    assert ids("--search", "say HI", "--kind", "chat.completion") == newest[1:3]
    assert ids("--sort", "oldest") == newest[::-1]
    assert ids("--owner", "nobody") == []
    assert ids("--until", "2000-01-01") == [] and ids("--since", "2000-01-01") == newest
    bad = omni("ls", "--db", str(served.db), "--until", "later")
    assert bad.returncode == 2 and "or an ISO time" in bad.stderr


def test_show_json_has_the_apis_usage_and_output(served: Served) -> None:
    rid = str(served.plain["id"])
    result = omni("show", rid, "--db", str(served.db), "--json", "--events")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    usage = served.plain["usage"]
    assert isinstance(usage, dict)
    assert shown["usage"]["input_tokens"] == usage["input_tokens"]
    assert shown["usage"]["output_tokens"] == usage["output_tokens"]
    output = served.plain["output"]
    assert isinstance(output, list)
    assert shown["output_text"] == output[0]["content"][0]["text"]
    assert shown["request"]["input"][0]["text"] == "Plain one"
    assert [e["seq"] for e in shown["events"]] == list(range(len(shown["events"])))
    assert shown["events"][-1]["type"] == "response.incomplete"
    text = omni("show", rid, "--db", str(served.db)).stdout
    assert "status\tincomplete" in text and "time to first token\t" in text


def test_show_json_has_every_input_whole(tiny_engine: object, tmp_path: Path) -> None:
    db = tmp_path / "omni.db"
    engine = ScriptedEngine(tiny_engine)
    with running(engine, db) as (_, client):
        chain = make_chain(engine, client)
    shown = json.loads(omni("show", chain.ids[2], "--db", str(db), "--json").stdout)
    assert shown["request"]["input"][0]["text"] == LONG  # not cut
    assert shown["request"]["input"][0]["parts"] == [{"type": "text", "text": LONG}]
    first = json.loads(omni("show", chain.ids[0], "--db", str(db), "--json").stdout)
    assert first["request"]["tools"][0]["parameters"] == WEATHER["parameters"]
    assert first["request"]["tool_choice"] == "auto"
    assert first["request"]["metadata"] == {"case": "chain"}
    assert first["tool_calls"][0]["call_id"] == chain.call_id
    second = json.loads(omni("show", chain.ids[1], "--db", str(db), "--json").stdout)
    assert second["request"]["input"][0]["parts"][0]["call_id"] == chain.call_id
    text = omni("show", chain.ids[2], "--db", str(db)).stdout
    assert LONG not in text and "`omni show --json` has them whole" in text
    assert "tools\tget_weather" in omni("show", chain.ids[0], "--db", str(db)).stdout


def test_replay_prints_the_bytes_the_client_got(served: Served) -> None:
    for raw in (served.response, served.chat, served.chat_plain):
        result = subprocess.run(
            [sys.executable, "-m", "omni", "replay", first_id(raw), "--db", str(served.db)],
            capture_output=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == raw
    assert b"chat.completion.usage" not in served.chat_plain  # (stored, but never sent)


def test_stats_counts_what_ls_lists(served: Served) -> None:
    result = omni("stats", "--db", str(served.db), "--json")
    assert result.returncode == 0, result.stderr
    st = json.loads(result.stdout)
    assert st["total"] == 4 and st["by_kind"] == {"response": 2, "chat.completion": 2}
    assert st["ttft_ms_p50"] <= st["ttft_ms_p95"]
    assert "TTFT p95" in omni("stats", "--db", str(served.db), "--since", "2h").stdout


def test_an_unknown_id_is_one_line_and_status_1(served: Served) -> None:
    for cmd in ("show", "replay", "tail"):
        assert_one_line_error(omni(cmd, "resp_nope", "--db", str(served.db)), "resp_nope")


def test_a_reader_that_stops_reading_ends_it_quietly(served: Served) -> None:
    # `omni show ID --events | head -0`: the pipe is closed before it writes a line.
    rid = first_id(served.response)
    cmd = [sys.executable, "-m", "omni", "show", rid, "--events", "--db", str(served.db)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
    assert proc.returncode in (0, 141), err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_tail_follows_new_events_and_ctrl_c_ends_it(served: Served) -> None:
    tail = subprocess.Popen(
        [sys.executable, "-m", "omni", "tail", "--db", str(served.db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tail.stderr is not None and tail.stdout is not None
        assert "following every stream" in tail.stderr.readline()
        raw = streamed(
            served.base,
            "/v1/responses",
            {"model": MODEL, "input": "Tail me", "max_output_tokens": 24},
        )
        rid, lines = first_id(raw), []
        while not lines or lines[-1].split("\t")[3] not in RESPONSE_ENDS:
            line = tail.stdout.readline()
            assert line, "tail ended"
            if line.split("\t")[1] == rid:
                lines.append(line)
        frames = [f for f in raw.split(b"\n\n") if f]
        assert [int(line.split("\t")[2]) for line in lines] == list(range(len(frames)))
        tail.send_signal(signal.SIGINT)
        assert tail.wait(timeout=30) == 0
        assert "Traceback" not in tail.stderr.read()
    finally:
        if tail.poll() is None:
            tail.kill()


def test_tail_of_one_object_ends_with_it(served: Served) -> None:
    rid = first_id(served.response)
    result = omni("tail", rid, "--db", str(served.db), timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.split("\n") if line]
    public = [r for r in rows if r[1] == rid]
    assert [int(r[2]) for r in public] == list(
        range(len([f for f in served.response.split(b"\n\n") if f]))
    )
    assert rows[0][1] == f"{rid}/request" and rows[0][3] == "omni.request.accepted"


def test_a_terminal_gets_tables_and_colours(served: Served) -> None:
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni", "ls", "--db", str(served.db)],
        stdout=follower,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "80", "TERM": "xterm-256color"},  # not CI's own TERM
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the pty's other end closed
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=60) == 0
    os.close(leader)
    assert b"\x1b[" in out  # colours
    shown = re.sub(r"\x1b\[[0-9;]*m", "", out.decode())
    assert all(len(line) <= 80 for line in shown.splitlines())
    # Every id whole, to paste into `omni show`; the numbers' columns there.
    made = [served.plain["id"], *(first_id(r) for r in (served.response, served.chat))]
    assert all(rid in shown.split() for rid in made)
    header = shown.splitlines()[0].split()
    assert header[0] == "ID" and {"STATUS", "OWNER", "TOKENS", "TTFT"} <= set(header)


def _digest(db: Path) -> dict[str, str]:
    """The log's files, but -shm: SQLite's shared-memory index of the WAL, which any reader
    may rebuild (after a kill -9, the first one does); it holds no data."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(db.parent.iterdir())
        if p.name.startswith(db.name) and not p.name.endswith("-shm")
    }


def test_the_cli_reads_a_log_left_by_kill_9(tiny_model_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "omni.db"
    with serving(tiny_model_dir, db) as (base, proc):
        body = {"model": MODEL, "input": "long", "background": True, "max_output_tokens": 1500,
                "temperature": 0}  # fmt: skip
        rid = httpx.post(f"{base}/v1/responses", json=body, timeout=60).json()["id"]
        seen = kill_mid_stream(base, rid, proc, 20)
    seen = strip(seen).rsplit(b"\n\n", 1)[0] + b"\n\n"  # whole frames only
    assert (tmp_path / "omni.db-wal").exists()
    before = _digest(db)

    listed = omni("ls", "--db", str(db))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split("\t")[:3][::2] == [rid, "in_progress"]
    shown = json.loads(omni("show", rid, "--db", str(db), "--json").stdout)
    assert shown["summary"]["status"] == "in_progress" and shown["timings"]["total_ms"] is None
    replayed = subprocess.run(
        [sys.executable, "-m", "omni", "replay", rid, "--db", str(db)], capture_output=True
    ).stdout
    assert replayed.startswith(seen) and len(replayed) >= len(seen)
    assert json.loads(omni("stats", "--db", str(db), "--json").stdout)["by_status"] == {
        "in_progress": 1
    }
    assert _digest(db) == before  # read, never written


def _running_tokens(db: Path, rid: str) -> int | None:
    """The output tokens `omni ls` shows for `rid` while it is still in progress."""
    listed = omni("ls", "--db", str(db), "--status", "in_progress")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()[1:]]
    mine = [row for row in rows if row[0] == rid]
    return int(mine[0][5].split("→")[1]) if mine else None  # None: it has ended


def test_ls_counts_a_running_responses_tokens_as_they_come(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "omni.db"
    with serving(tiny_model_dir, db) as (base, _):
        body = {"model": MODEL, "input": "long", "background": True, "max_output_tokens": 5000,
                "temperature": 0}  # fmt: skip
        rid = httpx.post(f"{base}/v1/responses", json=body, timeout=60).json()["id"]
        with httpx.stream("GET", f"{base}/v1/responses/{rid}?stream=true", timeout=60) as s:
            for line in s.iter_lines():  # the first token is in the log
                if line == "event: response.output_text.delta":
                    break
        counts = [_running_tokens(db, rid), _running_tokens(db, rid)]
        httpx.post(f"{base}/v1/responses/{rid}/cancel", timeout=60)
        with httpx.stream("GET", f"{base}/v1/responses/{rid}?stream=true", timeout=60) as s:
            s.read()  # to its terminal event
    assert counts[0] is not None and counts[1] is not None, "it ended before it was listed"
    assert 0 < counts[0] < counts[1]
    ended = json.loads(omni("show", rid, "--db", str(db), "--json").stdout)
    assert ended["summary"]["output_tokens"] == ended["usage"]["output_tokens"] >= counts[1]


def test_ls_says_why_a_response_failed(tiny_model_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "omni.db"
    with serving(tiny_model_dir, db) as (base, proc):
        # Unending: still generating when killed, so the restart ends it failed.
        body = {"model": MODEL, "input": "long", "max_output_tokens": 1500, "stream": True}
        body.update(UNENDING)
        with httpx.stream("POST", f"{base}/v1/responses", json=body, timeout=60) as s:
            deltas = 0
            for line in s.iter_lines():
                deltas += line == "event: response.output_text.delta"
                if deltas == 5:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        proc.wait()
    with serving(tiny_model_dir, db):  # its start ends the foreground response: failed
        listed = omni("ls", "--db", str(db), "--status", "failed", "--since", "1h")
    assert listed.returncode == 0, listed.stderr
    (row,) = [line.split("\t") for line in listed.stdout.splitlines()[1:]]
    prompt, sent = row[5].split("→")
    assert int(prompt) > 0 and int(sent) >= 5  # no usage on a failure: counted from the log
    assert row[8].startswith("server_error: The server restarted")


def test_a_stopped_servers_log_is_read_without_leaving_files(
    served: Served, tmp_path: Path
) -> None:
    copy = tmp_path / "omni.db"
    with sqlite3.connect(served.db) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    dst = sqlite3.connect(copy)
    dst.execute("PRAGMA journal_mode=DELETE")  # as a server leaves it when it stops: no WAL
    dst.close()
    before = _digest(copy)
    assert set(before) == {"omni.db"} and not (tmp_path / "omni.db-shm").exists()
    assert omni("ls", "--db", str(copy)).returncode == 0
    assert omni("replay", first_id(served.response), "--db", str(copy)).returncode == 0
    assert _digest(copy) == before and not (tmp_path / "omni.db-shm").exists()


def test_a_log_older_than_the_views_is_not_migrated(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    command.upgrade(alembic_config(str(db)), "0004")
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    before = _digest(db)
    result = omni("ls", "--db", str(db))
    assert_one_line_error(result, "omni db upgrade")
    assert _digest(db) == before
    missing = omni("ls", "--db", str(tmp_path / "none.db"))
    assert_one_line_error(missing, "no database at")
    assert not (tmp_path / "none.db").exists()
