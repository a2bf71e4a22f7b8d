"""Claude Code (`@anthropic-ai/claude-code` from npm) completes turns against Omni's Messages API.

`claude -p` sends its whole harness every request: a long system prompt, two dozen tools,
thinking, `context_management` and `metadata` (and, asking for its own default model, a system
message inside the conversation and an effort), streamed, to `/v1/messages?beta=true` with
`x-api-key`. Its first request is ~90,000 tokens of the tiny tokenizer; so the model here is one
layer with 131,072 positions (one layer's prefill evaluates only the last position's attention:
a few seconds). Three turns take ~20-25 s on 2 cores, and the first install of Claude Code
(~235 MB from npm) a few seconds more.

A random model never stops, and never writes a call. This one is scripted in its weights
(omni.testing.scripted_llama): it answers one whole reply and stops, or, where the user's
prompt holds a cue, calls Read on a file whose text holds another cue; seeing that cue in the
tool's result, it answers. Everything else is real: MLX, the tokenizer, the template, the
call parser, the prefix cache, the log, HTTP through Hypercorn, and Claude Code itself.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from omni.api.app import Settings
from omni.api.gate import Access
from omni.api.keys import KeyRing, api_key
from omni.cli.program import parser
from omni.cli.serve import sampling_defaults
from omni.projections.messages import fold_message
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.source import ModelSource
from omni.testing.scripted_llama import Script, build_scripted_llama
from tests.agents.cli import npm_command, run_cli
from tests.agents.recording import Exchange, Recording
from tests.server import ServerThread

CLAUDE_VERSION = "2.1.197"
CONTEXT = 131072  # Claude Code's first request is ~90,500 tokens of the tiny tokenizer
TURN_TIMEOUT = 240  # seconds; a turn takes about 5 here
MODEL = "tiny-llama"
# The names Claude Code is told to ask for (its main and its small, fast model), both
# served by the tiny model through Omni's aliases (`omni serve --alias NAME=MODEL`).
MAIN, SMALL = "claude-sonnet-4-5", "claude-haiku-4-5"
# What this version asks for when told no model: its request then differs (a system message
# inside the conversation, adaptive thinking, an effort).
OWN_DEFAULT = "claude-opus-4-8"
KEY = "sk-omni-claude-code"
OWNER = "claude-code"
ASK, TOLD = "#omni-read-the-notes#", "#omni-notes-told#"
NOTES = f"The notes: {TOLD}\n"
EVENT = TypeAdapter[Any](RawMessageStreamEvent)


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    """The pinned Claude Code, installed with npm once per machine (OMNI_TEST_HOME)."""
    claude = npm_command(
        "@anthropic-ai/claude-code", CLAUDE_VERSION, "claude-code", "claude", "the Claude Code test"
    )
    version = subprocess.run([str(claude), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"{CLAUDE_VERSION} (Claude Code)", (
        version.stdout,
        version.stderr,
    )
    return claude


@dataclass
class Served:
    server: ServerThread
    recording: Recording
    db: Path
    workdir: Path  # where Claude Code runs, and the notes it may read
    script: Script


@pytest.fixture(scope="module")
def claude_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("work")
    (workdir / "notes.txt").write_text(NOTES)
    read = {"name": "Read", "arguments": {"file_path": str(workdir / "notes.txt")}}
    script = Script(
        ask=ASK,
        told=TOLD,
        reply="Hello from Omni.",
        call=json.dumps(read),  # a plain JSON call, as Omni asks of a model without a format
        answer="The notes are read.",
    )
    model_dir = build_scripted_llama(tmp_path_factory.mktemp("models") / MODEL, script, CONTEXT)
    engine = MLXEngine(ModelSource(str(model_dir), MODEL))
    engine.start()
    db = tmp_path_factory.mktemp("db") / "omni.db"
    as_served = sampling_defaults(parser().parse_args(["serve"]))  # `omni serve`, no flags
    settings = Settings(
        db_path=str(db),
        keepalive=1.0,
        defaults=as_served,
        model_aliases=frozenset({MAIN, SMALL, OWN_DEFAULT}),
        access=Access(keys=KeyRing([api_key(KEY, OWNER)])),
    )
    srv = ServerThread(settings, engine)
    recording = Recording(srv.app.asgi_app)
    srv.app.asgi_app = recording  # type: ignore[method-assign,assignment]
    srv.start()
    yield Served(srv, recording, db, workdir, script)
    srv.stop()
    engine.close()


@dataclass
class Turn:
    """What `claude -p --output-format json` printed and the messages it sent meanwhile."""

    result: dict[str, Any]
    exchanges: list[Exchange]
    report: str


def claude_turn(
    claude_bin: Path,
    served: Served,
    tmp_path: Path,
    prompt: str,
    models: bool = True,
    key: str = "ANTHROPIC_API_KEY",
) -> Turn:
    """One `claude -p` turn against the server, checked to have completed cleanly
    (`models`: told which models to ask for, else asking for its own; `key`: the variable
    that gives it the key)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": served.server.base_url,
        key: KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    if models:
        env |= {"ANTHROPIC_MODEL": MAIN, "ANTHROPIC_SMALL_FAST_MODEL": SMALL}
    seen = len(served.recording.exchanges)
    cmd = [str(claude_bin), "-p", prompt, "--output-format", "json"]
    done, report = run_cli(cmd, served.workdir, env, TURN_TIMEOUT)
    assert done.returncode == 0, report
    result = json.loads(done.stdout)
    assert result["type"] == "result" and result["subtype"] == "success", report
    assert result["is_error"] is False, report
    # Beside its messages Claude Code sends only a HEAD / as it starts (a connection's warm-up,
    # without the key: a 401 here, which it does not read).
    exchanges = served.recording.exchanges[seen:]
    sent = [e for e in exchanges if (e.method, e.path) == ("POST", "/v1/messages")]
    assert {(e.method, e.path) for e in exchanges} - {("POST", "/v1/messages")} <= {("HEAD", "/")}
    assert all(e.query == "beta=true" for e in sent), [e.query for e in sent]
    return Turn(result, sent, report)


def test_claude_code_completes_a_turn(
    claude_bin: Path, claude_server: Served, tmp_path: Path
) -> None:
    turn = claude_turn(claude_bin, claude_server, tmp_path, "say hi")
    assert turn.result["result"] == claude_server.script.reply, turn.report

    assert turn.exchanges, turn.report
    messages = [check_exchange(claude_server, e) for e in turn.exchanges]
    assert [b["type"] for b in messages[-1]["content"]] == ["text"], messages
    assert messages[-1]["content"][0]["text"] == claude_server.script.reply
    assert messages[-1]["stop_reason"] == "end_turn"
    first = json.loads(turn.exchanges[0].body)
    # What Claude Code sends, which Omni takes: its harness is all there.
    assert len(first["tools"]) > 10 and {"Read", "Bash"} <= {t["name"] for t in first["tools"]}
    assert first["thinking"]["type"] in ("enabled", "adaptive")
    assert (
        messages[0]["usage"]["input_tokens"] + messages[0]["usage"]["cache_read_input_tokens"]
        > 2048
    )


def test_claude_code_reads_a_file_with_a_tool_and_answers(
    claude_bin: Path, claude_server: Served, tmp_path: Path
) -> None:
    script = claude_server.script
    turn = claude_turn(claude_bin, claude_server, tmp_path, f"Read notes.txt {ASK}")
    assert turn.result["result"] == script.answer, turn.report

    # The model calls Read; Claude Code runs it and sends the file back in the next request.
    assert len(turn.exchanges) == 2, turn.report
    called, answered = (check_exchange(claude_server, e) for e in turn.exchanges)
    [use] = called["content"]
    assert use["type"] == "tool_use" and use["id"].startswith("toolu_")
    assert (use["name"], use["input"]) == ("Read", json.loads(script.call)["arguments"])
    assert called["stop_reason"] == "tool_use"
    history = json.loads(turn.exchanges[1].body)["messages"]
    assert history[-2]["role"] == "assistant"
    [sent_back] = [b for b in history[-2]["content"] if b["type"] == "tool_use"]
    assert {k: sent_back[k] for k in ("id", "name", "input")} == {
        k: use[k] for k in ("id", "name", "input")
    }
    [result] = [b for b in history[-1]["content"] if b.get("type") == "tool_result"]
    assert result["tool_use_id"] == use["id"] and not result.get("is_error"), result
    assert NOTES.strip() in json.dumps(result["content"])
    assert [b["type"] for b in answered["content"]] == ["text"]
    assert answered["content"][0]["text"] == script.answer
    assert answered["stop_reason"] == "end_turn"
    # The second request repeats the first's ~90,000 tokens: the prefix cache holds them.
    assert answered["usage"]["cache_read_input_tokens"] > 2048, answered["usage"]


def test_claude_code_asking_for_its_own_model_completes_a_turn(
    claude_bin: Path, claude_server: Served, tmp_path: Path
) -> None:
    """Told no model, Claude Code asks for its own, aliased here, with another request: the
    list of agent types as a system message after the user's, adaptive thinking, an effort.
    Given ANTHROPIC_AUTH_TOKEN rather than a key, it sends `Authorization: Bearer`."""
    turn = claude_turn(
        claude_bin, claude_server, tmp_path, "say hi", models=False, key="ANTHROPIC_AUTH_TOKEN"
    )
    assert turn.result["result"] == claude_server.script.reply, turn.report
    [exchange] = turn.exchanges
    assert exchange.headers.get("authorization") == f"Bearer {KEY}"
    assert "x-api-key" not in exchange.headers
    request = json.loads(exchange.body)
    assert request["model"] == OWN_DEFAULT
    assert [m["role"] for m in request["messages"]] == ["user", "system"]
    assert request["thinking"] == {"type": "adaptive"} and "effort" in request["output_config"]
    message = check_exchange(claude_server, exchange)
    assert message["content"] == [{"type": "text", "text": claude_server.script.reply}]


# --- what every request and response looked like, and what the log kept -------------------


@dataclass(frozen=True)
class Frame:
    event: str
    data: str
    id: int | None


def anthropic_frames(body: bytes) -> list[Frame]:
    """Anthropic's SSE, strictly: each frame `event:` then `data:` (and Omni's `id:`)."""
    assert body.endswith(b"\n\n"), body[-200:]
    frames = []
    for block in body.decode().split("\n\n")[:-1]:
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block[:200]
        assert len(lines) in (2, 3), block[:200]
        id_ = int(lines[2].removeprefix("id: ")) if len(lines) == 3 else None
        frames.append(Frame(lines[0].removeprefix("event: "), lines[1].removeprefix("data: "), id_))
    return frames


def check_exchange(served: Served, exchange: Exchange) -> dict[str, Any]:
    """One request Claude Code sent and the stream Omni answered: both in the log, the stream
    well-formed in Anthropic's grammar. Returns the message the stream folds to."""
    assert exchange.status == 200, bytes(exchange.response[:500])
    bearer = exchange.headers.get("authorization", "").removeprefix("Bearer ")
    assert KEY in (exchange.headers.get("x-api-key"), bearer)  # the key, as either header
    assert "anthropic-version" in exchange.headers
    request = json.loads(exchange.body)
    assert request["model"] in (MAIN, SMALL, OWN_DEFAULT) and request["stream"] is True

    frames = [f for f in anthropic_frames(bytes(exchange.response)) if f.event != "ping"]
    events = [json.loads(f.data) for f in frames]
    for frame, event in zip(frames, events, strict=True):
        assert event["type"] == frame.event
        EVENT.validate_python(event)  # the SDK's own types
    assert [f.id for f in frames] == list(range(len(frames)))
    kinds = [f.event for f in frames]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    _check_blocks(events[1:-2])
    message = fold_message([(f.event, f.data) for f in frames])
    Message.model_validate(message)
    assert message["id"].startswith("msg_")

    # The log: the accepted request as Claude Code sent it, and the events exactly as sent.
    with sqlite3.connect(served.db) as db:
        accepted = db.execute(
            "SELECT type, data FROM events WHERE stream_id = ? ORDER BY seq",
            (f"{message['id']}/request",),
        ).fetchall()
        logged = db.execute(
            "SELECT seq, type, data FROM events WHERE stream_id = ? ORDER BY seq",
            (message["id"],),
        ).fetchall()
        [row] = db.execute(
            "SELECT status, model, stop_reason, input_tokens, cache_read_input_tokens, "
            "output_tokens, owner FROM messages WHERE id = ?",
            (message["id"],),
        ).fetchall()
    assert accepted[0][0] == "omni.request.accepted"
    record = json.loads(accepted[0][1])
    assert (record["kind"], record["owner"]) == ("message", OWNER)
    body = record["body"]
    assert body["model"] == request["model"] and body["max_tokens"] == request["max_tokens"]
    said = [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
    assert said == [{"role": m["role"], "content": m["content"]} for m in request["messages"]]
    assert [t["name"] for t in body["tools"]] == [t["name"] for t in request["tools"]]
    assert logged == [(f.id, f.event, f.data) for f in frames]
    usage = message["usage"]
    assert row == (
        "completed",
        request["model"],
        message["stop_reason"],
        usage["input_tokens"],
        usage["cache_read_input_tokens"],
        usage["output_tokens"],
        OWNER,
    )  # the messages view, as `sqlite3 omni.db` shows it
    return message


def _check_blocks(events: list[dict[str, Any]]) -> None:
    """Content blocks one after another, numbered from 0: start, its deltas, stop."""
    index, open_ = -1, False
    for event in events:
        if event["type"] == "content_block_start":
            assert not open_
            index, open_ = index + 1, True
        else:
            assert event["type"] in ("content_block_delta", "content_block_stop") and open_
            open_ = event["type"] == "content_block_delta"
        assert event["index"] == index, events
    assert not open_
