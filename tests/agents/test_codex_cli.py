"""The Codex CLI (`@openai/codex` from npm) completes a turn against Omni's Responses API.

Codex's first request is ~21,000 tokens of the tiny tokenizer (a long developer prompt, tools
of several types), beyond the shared tiny model's 2,048 positions; so this module serves a
one-layer copy with 65,536. With one layer, MLX never evaluates the prompt's attention (only
its keys and values), so the prefill takes well under a second. A random model never stops
of itself: the turn asks for an output schema (`--output-schema`), which Omni's grammar
enforces and ends. The server runs with `omni serve`'s defaults: Codex sends no output limit."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from tokenizers import Tokenizer

from omni.api.app import Settings
from omni.cli.program import parser
from omni.cli.serve import sampling_defaults
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.source import ModelSource
from omni.testing.llama import build_tiny_llama
from tests.agents.cli import npm_command, run_cli
from tests.agents.recording import Exchange, Recording
from tests.api._helpers import MODEL, parse_frames
from tests.server import ServerThread

CODEX_VERSION = "0.171.0"
CONTEXT = 65536  # room for a turn or two of random tool calls (their strings run long)
TURN_TIMEOUT = 240  # seconds; a turn takes about 2 here, ~20 when the model calls a tool
SCHEMA = {
    "type": "object",
    "properties": {"greeting": {"type": "string", "maxLength": 12}},
    "required": ["greeting"],
    "additionalProperties": False,
}
# More output tokens than `omni serve --max-tokens` once capped every answer at by default.
LONG = 513
# Codex's own notice for a model outside its catalogue: expected here, not a failure.
UNKNOWN_MODEL = f"Model metadata for `{MODEL}` not found"
# Codex's report of a call it could not run (a random model may call `request_user_input`,
# which `codex exec` offers but refuses): the model's mistake, returned to it as the call's
# output, not a protocol error.
TOOL_ERROR = "codex_core::tools::router"


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    """The pinned Codex CLI, installed with npm once per machine (OMNI_TEST_HOME)."""
    codex = npm_command("@openai/codex", CODEX_VERSION, "codex", "codex", "the Codex CLI test")
    version = subprocess.run([str(codex), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"codex-cli {CODEX_VERSION}", (version.stdout, version.stderr)
    return codex


@dataclass
class Served:
    server: ServerThread
    recording: Recording
    engine: MLXEngine
    model_dir: Path


def codex_model(folder: Path) -> Path:
    """The one-layer tiny model with CONTEXT positions, built under `folder`."""
    model_dir = build_tiny_llama(folder / MODEL, layers=1)
    config = json.loads((model_dir / "config.json").read_text())
    config["max_position_embeddings"] = CONTEXT  # RoPE: no weights depend on it
    (model_dir / "config.json").write_text(json.dumps(config, indent=2))
    return model_dir


@pytest.fixture(scope="module")
def codex_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    model_dir = codex_model(tmp_path_factory.mktemp("models"))
    engine = MLXEngine(ModelSource(str(model_dir), MODEL))
    engine.start()
    db_path = tmp_path_factory.mktemp("db") / "omni.db"
    # `omni serve`, greedy: a random model calls a tool (a turn more) only now and then, which
    # made these turns take 1 to 20 s; greedy, each prompt has one answer.
    as_served = sampling_defaults(parser().parse_args(["serve", "--temp", "0"]))
    settings = Settings(db_path=str(db_path), keepalive=1.0, defaults=as_served)
    srv = ServerThread(settings, engine)
    recording = Recording(srv.app.asgi_app)
    srv.app.asgi_app = recording  # type: ignore[method-assign,assignment]
    srv.start()
    yield Served(srv, recording, engine, model_dir)
    srv.stop()
    engine.close()


def codex_config(base_url: str) -> str:
    return f"""\
model = "{MODEL}"
model_provider = "omni"
check_for_update_on_startup = false

[analytics]
enabled = false

# A random model may call any tool it is offered: keep it away from the shell and the disk,
# and from goals, which an ephemeral thread refuses.
[features]
shell_tool = false
unified_exec = false
view_image = false
goals = false

[model_providers.omni]
name = "Omni"
base_url = "{base_url}/v1"
env_key = "OMNI_TEST_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


@dataclass
class Turn:
    """What `codex exec` printed (its --json events) and the requests it sent meanwhile."""

    done: subprocess.CompletedProcess[str]
    events: list[dict[str, Any]]
    exchanges: list[Exchange]
    answer: dict[str, Any]  # the last message, parsed as the output schema's JSON
    report: str


def codex_exec(
    codex_bin: Path, served: Served, tmp_path: Path, schema: dict[str, Any], prompt: str
) -> Turn:
    """One `codex exec` turn against the server, checked to have completed cleanly."""
    home, workdir = tmp_path / "home", tmp_path / "work"
    codex_home = home / ".codex"
    for d in (codex_home, workdir):
        d.mkdir(parents=True)
    (codex_home / "config.toml").write_text(codex_config(served.server.base_url))
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema))
    last = tmp_path / "last-message.txt"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "OMNI_TEST_API_KEY": "dummy",
    }
    cmd = [
        str(codex_bin), "exec",
        "--strict-config",  # a config key this version does not know is an error
        "--skip-git-repo-check",
        "--ephemeral",
        "--sandbox", "read-only",
        "--json",
        "--color", "never",
        "--output-schema", str(schema_file),
        "--output-last-message", str(last),
        prompt,
    ]  # fmt: skip
    seen = len(served.recording.responses())
    done, report = run_cli(cmd, workdir, env, TURN_TIMEOUT)

    assert done.returncode == 0, report
    errors = [ln for ln in done.stderr.splitlines() if "ERROR" in ln and TOOL_ERROR not in ln]
    assert not errors, report
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "thread.started" and kinds[-1] == "turn.completed", report
    assert "turn.failed" not in kinds and "error" not in kinds, report
    errors = [e["item"] for e in events if e.get("item", {}).get("type") == "error"]
    assert all(UNKNOWN_MODEL in e["message"] for e in errors), report
    [message] = [e["item"] for e in events if e.get("item", {}).get("type") == "agent_message"]
    assert last.read_text().strip() == message["text"]
    exchanges = served.recording.responses()[seen:]
    return Turn(done, events, exchanges, json.loads(message["text"]), report)


def test_codex_exec_completes_a_turn(codex_bin: Path, codex_server: Served, tmp_path: Path) -> None:
    turn = codex_exec(codex_bin, codex_server, tmp_path, SCHEMA, "say hi")
    answer, events = turn.answer, turn.events
    assert set(answer) == {"greeting"} and len(answer["greeting"]) <= 12, turn.report

    # The server's side: streamed requests in Codex's shape, each ended by response.completed;
    # the model may call a tool first (the answer-or-call grammar allows it), and then each
    # call's output comes back in the next request, which resends the whole history.
    exchanges = turn.exchanges
    offered = _function_schemas(json.loads(exchanges[0].body))
    pending: set[str] = set()
    for i, exchange in enumerate(exchanges):
        assert (exchange.method, exchange.path, exchange.status) == ("POST", "/v1/responses", 200)
        body = json.loads(exchange.body)
        assert body["model"] == MODEL and body["stream"] is True and body["store"] is False
        assert body["text"]["format"]["type"] == "json_schema"
        assert {"function", "namespace", "web_search"} <= {t["type"] for t in body["tools"]}
        returned = {
            item["call_id"]
            for item in body["input"]
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }
        assert pending <= returned, (i, pending, returned)
        frames = parse_frames(bytes(exchange.response))
        assert [f.event for f in frames][:2] == ["response.created", "response.in_progress"]
        assert frames[-1].event == "response.completed"
        output = frames[-1].data["response"]["output"]
        calls = [item for item in output if item["type"] == "function_call"]
        for call in calls:  # valid for the tool's schema: the grammar held it there
            jsonschema.validate(json.loads(call["arguments"]), offered[call["name"]])
        pending = {call["call_id"] for call in calls}
        if i == len(exchanges) - 1:
            assert not calls and output[-1]["type"] == "message", output
        usage = frames[-1].data["response"]["usage"]
        assert usage["input_tokens"] > 2048
    assert events[-1]["usage"]["input_tokens"] == sum(
        parse_frames(bytes(e.response))[-1].data["response"]["usage"]["input_tokens"]
        for e in exchanges
    )


def test_codex_completes_a_turn_longer_than_512_tokens(
    codex_bin: Path, codex_server: Served, tmp_path: Path
) -> None:
    """Codex sends no output limit: its answer runs until the grammar lets it end, here only
    after more than 512 tokens, and the turn completes rather than ending "ERROR: Incomplete
    response" at a default cap. The essay is of letters no two of which the tiny tokenizer
    joins in one token, so each of its characters is a token of its own."""
    letters = "xyz"
    vocabulary = Tokenizer.from_file(str(codex_server.model_dir / "tokenizer.json"))
    joined = [
        text
        for token in vocabulary.get_vocab().values()
        if len(text := vocabulary.decode([token])) > 1 and set(text) <= set(letters)
    ]
    assert joined == []  # else an essay of LONG characters could be fewer tokens
    essay = {
        "type": "string",
        "pattern": f"^[{letters}]+$",
        "minLength": LONG,
        "maxLength": LONG + 64,
    }
    schema = {
        "type": "object",
        "properties": {"essay": essay},
        "required": ["essay"],
        "additionalProperties": False,
    }
    turn = codex_exec(codex_bin, codex_server, tmp_path, schema, "write a long essay")
    assert set(turn.answer) == {"essay"} and len(turn.answer["essay"]) >= LONG, turn.report
    last = parse_frames(bytes(turn.exchanges[-1].response))[-1]
    assert json.loads(turn.exchanges[-1].body).get("max_output_tokens") is None
    assert last.event == "response.completed", turn.report
    response = last.data["response"]
    assert response["status"] == "completed" and response["output"][-1]["type"] == "message"
    assert response["usage"]["output_tokens"] >= LONG
    assert turn.events[-1]["usage"]["output_tokens"] >= LONG  # as Codex counted it too


def _function_schemas(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t["parameters"] for t in body["tools"] if t["type"] == "function"}
