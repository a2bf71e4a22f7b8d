"""`omni` as a user runs it: real processes, one-line errors, restarts that lose nothing."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api._helpers import UNENDING
from tests.server import free_port


def omni(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni", *args], capture_output=True, text=True, timeout=timeout
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("omni: error:")]
    assert len(errors) == 1 and fragment in errors[0], result.stderr


def kill_mid_stream(base: str, response_id: str, proc: subprocess.Popen[str], deltas: int) -> bytes:
    """Follow a response live and `kill -9` the server once `deltas` text deltas came; the
    bytes read by then."""
    with httpx.stream("GET", f"{base}/v1/responses/{response_id}?stream=true", timeout=60) as s:
        seen = b""
        for chunk in s.iter_bytes():
            seen += chunk
            if seen.count(b"event: response.output_text.delta") >= deltas:
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.wait()
    return seen


@contextmanager
def serving(
    model: Path,
    db: Path,
    log_level: str = "warning",
    log: Path | None = None,
    *extra: str,
    env: dict[str, str] | None = None,
    port: int | None = None,
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`omni serve` on `port` (else a free one) until the block ends (SIGTERM); its stderr
    goes to `log`, `env` added to its environment."""
    port = port or free_port()
    stderr = log.open("w") if log else None
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "omni",
            "serve",
            "--model",
            str(model),
            "--db",
            str(db),
            "--port",
            str(port),
            "--log-level",
            log_level,
            *extra,
        ],
        text=True,
        stderr=stderr,
        env={**os.environ, **(env or {})},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/health", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, "server exited during start-up"
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=60)
        if stderr:
            stderr.close()


def test_db_upgrade_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "omni.db"
    for _ in range(2):
        result = omni("db", "upgrade", "--db", str(db))
        assert result.returncode == 0, result.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        cols = [r[1] for r in conn.execute("PRAGMA table_info(events)")]
    assert cols == ["position", "stream_id", "seq", "type", "data", "created_at"]


def test_missing_model_is_one_line(tmp_path: Path) -> None:
    result = omni(
        "serve",
        "--db",
        str(tmp_path / "o.db"),
        "--model",
        str(tmp_path / "nope"),
        "--port",
        str(free_port()),
    )
    assert_one_line_error(result, "model not found")
    assert list(tmp_path.iterdir()) == []  # the database it made first is gone again


def test_unwritable_database_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = omni("serve", "--db", str(blocker / "omni.db"))
    assert_one_line_error(result, "database")
    result = omni("db", "upgrade", "--db", str(tmp_path))  # a folder is no database
    assert_one_line_error(result, "database")


def test_port_taken_is_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = omni(
            "serve",
            "--db",
            str(tmp_path / "o.db"),
            "--model",
            str(tiny_model_dir),
            "--port",
            str(port),
        )
    assert_one_line_error(result, "already in use")
    assert list(tmp_path.iterdir()) == []  # no database, no lock file


def test_a_failed_start_keeps_an_existing_database(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    assert omni("db", "upgrade", "--db", str(db)).returncode == 0
    result = omni("serve", "--db", str(db), "--model", str(tmp_path / "nope"))
    assert_one_line_error(result, "model not found")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.db"]


def test_env_settings_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from omni.cli.program import parser

    monkeypatch.setenv("OMNI_PORT", "12345")
    monkeypatch.setenv("OMNI_DB", str(tmp_path / "env.db"))
    monkeypatch.setenv("OMNI_MODEL", "some/model")
    args = parser().parse_args(["serve"])
    assert (args.port, args.db, args.model, args.host) == (
        12345,
        str(tmp_path / "env.db"),
        "some/model",
        "127.0.0.1",
    )


@pytest.mark.parametrize(
    ("argv", "env", "kept"),
    [([], "", True), (["--no-store-by-default"], "", False), ([], "1", False)],
)
def test_no_store_by_default_from_the_flag_or_the_environment(
    argv: list[str], env: str, kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from omni.cli.program import parser

    monkeypatch.setenv("OMNI_NO_STORE_BY_DEFAULT", env)
    assert parser().parse_args(["serve", *argv]).no_store_by_default is not kept


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--port", "0"),
        ("--port", "70000"),
        ("--max-batch-size", "0"),
        ("--max-queued", "0"),  # would refuse every request, even on an idle server
        ("--cache-max-entries", "9223372036854775808"),
        ("--cache-max-entries", "-2"),
        ("--cache-max-age", "nan"),
        ("--cache-max-age", "-1"),
        ("--cache-max-age", "1e16"),  # its milliseconds would overflow SQLite's integers
        ("--prompt-cache-gb", "inf"),
        ("--prompt-cache-entries", "2.5"),
    ],
)
def test_out_of_range_numbers_are_a_usage_error(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from omni.cli.program import parser

    with pytest.raises(SystemExit) as exit:
        parser().parse_args(["serve", flag, value])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and repr(value) in err and "Traceback" not in err


def test_out_of_range_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from omni.cli.program import parser

    monkeypatch.setenv("OMNI_MAX_BATCH_SIZE", "abc")
    with pytest.raises(SystemExit):
        parser().parse_args(["serve"])
    err = capsys.readouterr().err
    assert "--max-batch-size" in err and "OMNI_MAX_BATCH_SIZE" in err
    monkeypatch.setenv("OMNI_MAX_BATCH_SIZE", "")  # empty: as if unset
    monkeypatch.setenv("OMNI_PORT", "")
    args = parser().parse_args(["serve"])
    assert (args.max_batch_size, args.port) == (32, 10240)
    monkeypatch.setenv("OMNI_MAX_BATCH_SIZE", "3")
    monkeypatch.setenv("OMNI_CACHE_MAX_ENTRIES", "-1")
    monkeypatch.setenv("OMNI_CACHE_MAX_AGE", "0.5")
    args = parser().parse_args(["serve"])
    assert (args.max_batch_size, args.cache_max_entries, args.cache_max_age) == (3, -1, 0.5)


def test_sampling_flags_are_the_models_own_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """--temp, --top-p and --max-tokens are unset by default: the model's recommended sampling
    and no output cap; given on the command line or in the environment, the operator's."""
    from omni.cli.program import parser
    from omni.cli.serve import sampling_defaults
    from omni.service.defaults import Defaults

    for name in ("OMNI_TEMP", "OMNI_TOP_P", "OMNI_MAX_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    assert sampling_defaults(parser().parse_args(["serve"])) == Defaults(None, None, None)
    given = ["serve", "--temp", "0", "--top-p", "0.9", "--max-tokens", "512"]
    assert sampling_defaults(parser().parse_args(given)) == Defaults(0.0, 0.9, 512)
    monkeypatch.setenv("OMNI_TEMP", "0.7")
    monkeypatch.setenv("OMNI_MAX_TOKENS", "")  # empty: as if unset
    assert sampling_defaults(parser().parse_args(["serve"])) == Defaults(0.7, None, None)
    serve = next(c for c in _subcommands(parser()) if c.prog == "omni serve")
    text = " ".join(serve.format_help().split())  # unwrapped
    assert "(default: the model's own, from its generation_config.json, else 1)" in text


def test_json_logs_go_to_the_log_file(tmp_path: Path, tiny_model_dir: Path) -> None:
    logs, stderr = tmp_path / "omni.log", tmp_path / "stderr"
    body = {"model": "tiny-llama", "input": "hi", "max_output_tokens": 4}
    args = ("--log-format", "json", "--log-file", str(logs))
    with serving(tiny_model_dir, tmp_path / "omni.db", "debug", stderr, *args) as (base, _):
        made = httpx.post(f"{base}/v1/responses", json=body, timeout=60).json()
        metrics = httpx.get(f"{base}/metrics", timeout=60).text
    records = [json.loads(line) for line in logs.read_text().splitlines()]  # each line: JSON
    assert {r["level"] for r in records} <= {"debug", "info", "warning", "error", "critical"}
    access = [r for r in records if r["logger"] == "omni.access"]
    assert {r["path"] for r in access} == {"/health", "/v1/responses", "/metrics"}
    assert all(r["level"] == "debug" for r in access if r["path"] != "/v1/responses")
    posted = [r for r in access if r["path"] == "/v1/responses"]
    assert len(posted) == 1
    assert (posted[0]["method"], posted[0]["status"], posted[0]["id"]) == ("POST", 200, made["id"])
    assert posted[0]["output_tokens"] == made["usage"]["output_tokens"]
    assert any(r["logger"] == "hypercorn.error" for r in records)  # not only access lines
    assert "omni.access" not in stderr.read_text()  # the file instead of stderr
    assert "omni_output_tokens_total" in metrics


def test_text_access_lines_at_info(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Probes and scrapes log at debug only: they come every few seconds."""
    stderr = tmp_path / "stderr"
    with serving(tiny_model_dir, tmp_path / "omni.db", "info", stderr) as (base, _):
        assert httpx.get(f"{base}/v1/models", timeout=60).status_code == 200
        assert httpx.get(f"{base}/v1/health", timeout=60).status_code == 200
    lines = [line for line in stderr.read_text().splitlines() if " omni.access: " in line]
    assert len(lines) == 1, lines
    assert lines[0].split()[2:5] == ["INFO", "omni.access:", "GET"]
    assert " /v1/models 200 " in lines[0] and "request_id=req_" in lines[0]


def test_bad_log_format_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNI_LOG_FORMAT", "xml")
    result = omni("serve", "--db", str(tmp_path / "omni.db"))
    assert_one_line_error(result, "OMNI_LOG_FORMAT")
    monkeypatch.delenv("OMNI_LOG_FORMAT")
    result = omni("serve", "--log-file", str(tmp_path / "no" / "such" / "dir.log"))
    assert_one_line_error(result, "dir.log")
    assert not (tmp_path / "omni.db").exists()


def test_restart_loses_nothing(tmp_path: Path, tiny_model_dir: Path) -> None:
    db = tmp_path / "omni.db"
    body = {"model": "tiny-llama", "input": "hi", "max_output_tokens": 8, "stream": True}
    with serving(tiny_model_dir, db) as (base, _):
        original = httpx.post(f"{base}/v1/responses", json=body, timeout=60).content
        first = httpx.get(f"{base}/v1/models").json()["data"][0]["id"]
        response_id = original.split(b'"id":"', 1)[1].split(b'"', 1)[0].decode()
    with serving(tiny_model_dir, db) as (base, _):
        replay = httpx.get(f"{base}/v1/responses/{response_id}?stream=true", timeout=60).content
        assert httpx.get(f"{base}/v1/models").json()["data"][0]["id"] == first
    assert replay == original


MARKER = "unstored-left-behind-7f3a"  # the unstored completion's prompt, and nothing else's


def until_line(lines: Iterator[str], wanted: Callable[[str], bool]) -> str:
    """The first `data:` line that is `wanted` (what came before it is read and dropped)."""
    for line in lines:
        if line.startswith("data: ") and wanted(line):
            return line
    raise AssertionError("the stream ended before the line it was read for")


def chat_of(conn: sqlite3.Connection, content: str) -> str:
    """The chat completion whose request says `content`: its first chunk's stream."""
    (cid,) = conn.execute(
        "SELECT stream_id FROM events WHERE seq = 0 AND type = 'chat.completion.chunk'"
        " AND stream_id || '/request' IN (SELECT stream_id FROM events WHERE data LIKE ?)",
        (f"%{content}%",),
    ).fetchone()
    return str(cid)


@dataclass
class Crash:
    """One `omni serve` killed with kill -9 while it streamed a response, a stored and an
    unstored chat completion (each still generating: killed first), then started again."""

    db: Path
    response_id: str
    cid: str  # the stored completion
    unstored: str
    last: str  # the type of the stored completion's last row before the restart
    response: dict[str, Any]  # the response, read after the restart
    events: str  # its events, replayed then
    stored_status: int  # what reading the stored completion got then
    listed: list[dict[str, Any]]  # the stored completions listed then


@pytest.fixture(scope="module")
def crash(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Crash:
    db = tmp_path_factory.mktemp("crash") / "omni.db"
    response = {"input": "hi", "max_output_tokens": 100000, "stream": True, **UNENDING}
    chat = {"max_tokens": 100000, "stream": True, **UNENDING}
    stored = {**chat, "messages": [{"role": "user", "content": "hi"}], "store": True}
    unstored = {**chat, "messages": [{"role": "user", "content": MARKER}], "store": False}
    with serving(tiny_model_dir, db) as (base, proc):
        asked = [("/v1/responses", response), ("/v1/chat/completions", stored),
                 ("/v1/chat/completions", unstored)]  # fmt: skip
        with ExitStack() as opened:  # all three asked for first: all still generate at the kill
            streams = [
                opened.enter_context(httpx.stream("POST", f"{base}{path}", json=body, timeout=60))
                for path, body in asked
            ]
            wanted: list[Callable[[str], bool]] = [
                lambda line: "output_text.delta" in line,
                lambda line: '"content":"' in line and '"content":""' not in line,
                lambda line: '"content":"' in line,
            ]
            seen = [
                until_line(res.iter_lines(), want)
                for res, want in zip(streams, wanted, strict=True)
            ]
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        response_id = conn.execute(
            "SELECT stream_id FROM events WHERE type='response.created'"
        ).fetchone()[0]
        # The unstored completion by the id its client was sent: what the log kept of it at
        # the kill is what the next start must purge.
        cid, left_cid = chat_of(conn, '"content":"hi"'), json.loads(seen[2][6:])["id"]
        last = conn.execute(
            "SELECT type FROM events WHERE stream_id = ? ORDER BY seq DESC LIMIT 1", (cid,)
        ).fetchone()[0]
    conn.close()
    with serving(tiny_model_dir, db) as (base, _):
        read = httpx.get(f"{base}/v1/responses/{response_id}", timeout=60).json()
        events = httpx.get(f"{base}/v1/responses/{response_id}?stream=true", timeout=60).text
        status = httpx.get(f"{base}/v1/chat/completions/{cid}").status_code
        listed = httpx.get(f"{base}/v1/chat/completions").json()["data"]
    return Crash(db, response_id, cid, left_cid, last, read, events, status, listed)


def test_kill_9_mid_generation_leaves_a_failed_response(crash: Crash) -> None:
    response, events = crash.response, crash.events
    assert response["status"] == "failed"
    assert response["error"]["code"] == "server_error"
    assert "restarted" in response["error"]["message"]
    assert events.rstrip().split("\n\n")[-1].startswith("event: response.failed")


def test_kill_9_mid_chat_completion_ends_it_at_the_next_start(crash: Crash) -> None:
    """Its client is gone with the process: the next start ends it with an error event, as it
    ends a foreground response, so the stream is whole and purge can take it."""
    db, cid, last, listed = crash.db, crash.cid, crash.last, crash.listed
    assert last == "chat.completion.chunk"  # cut off: no ending yet
    # Not an answer, so not a stored completion (as at OpenAI): gone from the API's view.
    assert crash.stored_status == 404
    assert cid not in [c["id"] for c in listed]
    with sqlite3.connect(db) as conn:
        ends = conn.execute(
            "SELECT type, data FROM events WHERE stream_id = ? AND type LIKE 'completion.%'",
            (cid,),
        ).fetchall()
    assert len(ends) == 1 and ends[0][0] == "completion.error"
    assert "restarted" in ends[0][1]
    dry = omni("db", "purge", "--db", str(db), "--older-than", "0m", "--dry-run")
    assert dry.returncode == 0 and cid in dry.stdout


def test_kill_9_mid_unstored_completion_purges_it_at_the_next_start(crash: Crash) -> None:
    """Nobody can read an unstored completion a crash cut off (its client went with the
    process): the next start purges it, bytes and all, instead of ending it."""
    db, cid, marker = crash.db, crash.unstored, MARKER
    with sqlite3.connect(db) as conn:
        left = conn.execute(
            "SELECT count(*) FROM events WHERE stream_id IN (?, ?)", (cid, f"{cid}/request")
        ).fetchone()
    conn.close()
    assert left == (0,)
    files = [p for p in (db, db.with_name(db.name + "-wal")) if p.exists()]
    assert not [p.name for p in files if marker.encode() in p.read_bytes()]


def test_the_server_process_keeps_off_the_accelerator() -> None:
    """What `omni serve` runs first: after it, mlx-lm's generation stream (made at import) is on
    the CPU, so only the engine process opens the GPU."""
    code = (
        "from omni.runtime.platform.device import keep_server_off_the_accelerator as k; k()\n"
        "import mlx.core as mx\n"
        "from mlx_lm.generate import generation_stream\n"
        "assert generation_stream.device == mx.cpu, generation_stream.device\n"
        "assert mx.default_device() == mx.cpu\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _subcommands(child)


def test_every_flag_has_help_and_shows_its_default() -> None:
    from omni.cli.program import parser

    for command in _subcommands(parser()):
        text = " ".join(command.format_help().split())  # unwrapped
        for action in command._actions:
            if not action.option_strings:
                continue
            assert action.help, f"{command.prog} {action.option_strings[0]} has no help"
            if action.default not in (None, False, argparse.SUPPRESS):
                assert f"(default: {action.default})" in text, action.option_strings[0]
    result = omni("serve", "--help")
    assert result.returncode == 0
    assert "--max-queued MAX_QUEUED" in result.stdout and "(default: 10240)" in result.stdout


def test_a_bad_log_level_is_one_usage_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from omni.cli.program import parser

    result = omni("serve", "--log-level", "loud")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert errors == [
        "omni serve: error: argument --log-level: 'loud' (the flag or OMNI_LOG_LEVEL): "
        "expected one of debug, info, warning, error, critical"
    ]
    assert parser().parse_args(["serve", "--log-level", "WARNING"]).log_level == "warning"
    monkeypatch.setenv("OMNI_LOG_LEVEL", "Debug")
    assert parser().parse_args(["serve"]).log_level == "debug"


def test_one_server_per_database(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mlx-lm sets this at import (the fixture imported it here): the servers must do it alone.
    monkeypatch.delenv("TRANSFORMERS_NO_ADVISORY_WARNINGS", raising=False)
    db, lock = tmp_path / "omni.db", tmp_path / "omni.db.lock"
    with serving(tiny_model_dir, db, log=tmp_path / "first.log") as (base, first):
        assert lock.read_text() == f"{first.pid}\n"
        second = omni(
            "serve", "--db", str(db), "--model", str(tiny_model_dir), "--port", str(free_port())
        )
        assert_one_line_error(second, f"in use by another omni serve (pid {first.pid})")
        assert httpx.get(f"{base}/health", timeout=10).status_code == 200  # the first serves on
        first.kill()  # kill -9: the file stays, the OS drops the lock
        first.wait(timeout=60)
    assert lock.exists()
    with serving(tiny_model_dir, db, log=tmp_path / "again.log") as (base, again):
        assert httpx.get(f"{base}/v1/models", timeout=10).status_code == 200
        assert lock.read_text() == f"{again.pid}\n"
    assert again.returncode == 0 and not lock.exists()  # a clean stop removes it
    for log in ("first.log", "again.log"):
        text = (tmp_path / log).read_text()
        assert "PyTorch" not in text and "Traceback" not in text, text
