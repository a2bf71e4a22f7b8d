"""Codex CLI (`@openai/codex`) on Omni's Responses WebSocket: a provider with
`supports_websockets = true` opens `GET /v1/responses` with `Upgrade: websocket` and never
POSTs a turn.

`codex exec` runs one turn a process (its `resume` starts a new process, and so a new socket);
a session of several turns in one process is Codex's app server (`codex app-server`, JSON-RPC
over stdio, the protocol its IDE extensions speak), driven here: one socket carries Codex's
warm-up (`generate: false`) and three turns, the later ones chained by `previous_response_id`
to the unstored response before them with only their new items, as OpenAI's WebSocket mode
allows. A server that goes away between two turns and comes back: Codex opens a new socket
and the session goes on. The model and config are test_codex_cli's."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omni.api.app import Settings
from omni.cli.program import parser
from omni.cli.serve import sampling_defaults
from tests.agents.cli import run_cli
from tests.agents.recording import Exchange, Recording
from tests.agents.test_codex_cli import SCHEMA, Served, codex_bin, codex_config, codex_server
from tests.api._helpers import MODEL
from tests.server import ServerThread

__all__ = ["codex_bin", "codex_server"]  # the fixtures, served to this module too

TURN_TIMEOUT = 240.0  # seconds, as test_codex_cli's
PROMPTS = ("say hi", "say hi again", "once more")


def socket_config(base_url: str) -> str:
    config = codex_config(base_url)
    provider = 'wire_api = "responses"\n'
    assert provider in config
    return config.replace(provider, provider + "supports_websockets = true\n")


def codex_env(served: Served, tmp_path: Path) -> tuple[dict[str, str], Path]:
    home, workdir = tmp_path / "home", tmp_path / "work"
    codex_home = home / ".codex"
    for d in (codex_home, workdir):
        d.mkdir(parents=True)
    (codex_home / "config.toml").write_text(socket_config(served.server.base_url))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "OMNI_TEST_API_KEY": "dummy",
    }
    return env, workdir


class AppServer:
    """`codex app-server` on stdio: requests out, its messages in (a reader thread queues
    them, so a wait has a deadline)."""

    def __init__(self, process: subprocess.Popen[str]):
        self.process = process
        self.messages: queue.Queue[str] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.messages.put(line)

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        asked = self.next_id
        self.send({"id": asked, "method": method, "params": params})
        answer = self.wait(lambda m: m.get("id") == asked and "method" not in m)
        assert "error" not in answer, answer
        return dict(answer["result"])

    def wait(self, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + TURN_TIMEOUT
        while True:
            message = json.loads(self.messages.get(timeout=max(0.0, deadline - time.monotonic())))
            self.seen.append(message)
            if "id" in message and "method" in message:  # Codex asks (an approval, say): no
                error = {"code": -32601, "message": "not offered by this test"}
                self.send({"id": message["id"], "error": error})
            if done(message):
                return dict(message)


@contextmanager
def app_server(codex_bin: Path, env: dict[str, str], workdir: Path) -> Iterator[AppServer]:
    process = subprocess.Popen(
        [str(codex_bin), "app-server"],
        cwd=workdir,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield AppServer(process)
    finally:
        if process.stdin is not None:
            process.stdin.close()  # its input ends: it exits
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def creates(exchange: Exchange) -> list[dict[str, Any]]:
    return [json.loads(m) for m in exchange.received]


def answers(exchange: Exchange) -> list[dict[str, Any]]:
    """The terminal events the socket sent, one a response.create, in order."""
    ends = ("response.completed", "response.incomplete", "response.failed", "error")
    sent = [json.loads(m) for m in exchange.sent]
    return [e for e in sent if e["type"] in ends]


def check_socket(exchanges: list[Exchange]) -> Exchange:
    """One WebSocket at /v1/responses, with Codex's key and its beta header; nothing else."""
    assert [(e.method, e.path, e.websocket, e.status) for e in exchanges] == [
        ("GET", "/v1/responses", True, 101)
    ], [(e.method, e.path, e.status) for e in exchanges]
    [socket] = exchanges
    assert socket.headers["upgrade"].lower() == "websocket"
    assert socket.headers["authorization"] == "Bearer dummy"
    assert socket.headers["openai-beta"].startswith("responses_websockets=")
    return socket


def start_thread(codex: AppServer) -> str:
    codex.request("initialize", {"clientInfo": {"name": "omni-test", "version": "0"}})
    codex.send({"method": "initialized"})
    params = {"ephemeral": True, "sandbox": "read-only", "approvalPolicy": "never"}
    return str(codex.request("thread/start", params)["thread"]["id"])


def run_turn(codex: AppServer, thread: str, prompt: str) -> None:
    """One turn, to its end: completed, its answer the output schema's JSON."""
    params = {
        "threadId": thread,
        "input": [{"type": "text", "text": prompt}],
        "outputSchema": SCHEMA,
    }
    codex.request("turn/start", params)
    ended = codex.wait(lambda m: m.get("method") == "turn/completed")["params"]["turn"]
    assert ended["status"] == "completed", ended
    [message] = [i for i in ended["items"] if i["type"] == "agentMessage"]
    assert set(json.loads(message["text"])) == {"greeting"}, message


def test_codex_app_server_holds_three_turns_on_one_socket(
    codex_bin: Path, codex_server: Served, tmp_path: Path
) -> None:
    env, workdir = codex_env(codex_server, tmp_path)
    seen = len(codex_server.recording.responses())
    with app_server(codex_bin, env, workdir) as codex:
        thread = start_thread(codex)
        for prompt in PROMPTS:
            run_turn(codex, thread, prompt)
    report = "\n".join(json.dumps(m)[:300] for m in codex.seen)
    socket = check_socket(codex_server.recording.responses()[seen:])

    sent, ended = creates(socket), answers(socket)
    assert [m["type"] for m in sent] == ["response.create"] * len(sent), report
    assert len(ended) == len(sent), (len(ended), len(sent))
    # The warm-up: nothing generated, a response all the same.
    warm_up, *turns = sent
    assert warm_up["generate"] is False and warm_up["store"] is False
    assert ended[0]["type"] == "response.completed"
    assert ended[0]["response"]["output"] == []
    # Then the turns (a turn whose model calls a tool sends a request more): each ends
    # completed, and each one chained names the response just before it on this socket,
    # which the connection, not the log, holds (store: false).
    assert len(turns) >= len(PROMPTS)
    ids = [e["response"]["id"] for e in ended]
    for i, (create, end) in enumerate(zip(turns, ended[1:], strict=True), 1):
        assert create["model"] == MODEL and create["store"] is False
        assert end["type"] == "response.completed", end
        previous = create.get("previous_response_id")
        assert previous is None or previous == ids[i - 1], (i, previous)
        if previous is not None:  # only its new items, yet the model read the whole chain
            assert len(create["input"]) < len(turns[0]["input"])
            assert end["response"]["usage"]["input_tokens"] > 2048
    assert any(c.get("previous_response_id") for c in turns), "no turn was chained"


def test_codex_exec_and_its_resume_stay_on_the_socket(
    codex_bin: Path, codex_server: Served, tmp_path: Path
) -> None:
    """`codex exec`, then `codex exec resume --last`: two processes, each one socket (its
    warm-up and its turn's requests), the resumed one resending the session's history."""
    env, workdir = codex_env(codex_server, tmp_path)
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    flags = ["--strict-config", "--skip-git-repo-check", "--sandbox", "read-only", "--json"]
    prompts = PROMPTS[:2]
    for i, prompt in enumerate(prompts):
        resume = ["resume", "--last"] if i else []
        seen = len(codex_server.recording.responses())
        cmd = [str(codex_bin), "exec", *flags, *resume, "--output-schema", str(schema_file)]
        done, report = run_cli([*cmd, prompt], workdir, env, TURN_TIMEOUT)
        assert done.returncode == 0, report
        events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        assert events[-1]["type"] == "turn.completed", report
        socket = check_socket(codex_server.recording.responses()[seen:])
        sent, ended = creates(socket), answers(socket)
        assert sent[0]["generate"] is False and len(sent) >= 2, report
        assert [e["type"] for e in ended] == ["response.completed"] * len(sent), report
        asked = {
            part.get("text")
            for create in sent
            for item in create["input"]
            if item.get("type") == "message" and item.get("role") == "user"
            for part in item["content"]
        }
        # This process's prompt, and the session's earlier ones: the session went on.
        assert set(prompts[: i + 1]) <= asked, (i, asked)


def serving(served: Served, db: Path, port: int | None = None) -> tuple[ServerThread, Recording]:
    """A server on test_codex_cli's model and settings, over the log at `db`, recorded."""
    # `omni serve`, greedy (as tests.agents.test_codex_cli serves Codex: a turn of one answer)
    as_served = sampling_defaults(parser().parse_args(["serve", "--temp", "0"]))
    settings = Settings(db_path=str(db), keepalive=1.0, defaults=as_served)
    srv = ServerThread(settings, served.engine)
    if port is not None:  # where the server before it listened
        srv.port, srv.base_url = port, f"http://127.0.0.1:{port}"
    recording = Recording(srv.app.asgi_app)
    srv.app.asgi_app = recording  # type: ignore[method-assign,assignment]
    return srv.start(), recording


def test_a_session_goes_on_over_a_new_socket_after_the_server_restarts(
    codex_bin: Path, codex_server: Served, tmp_path: Path
) -> None:
    """The server goes away between two turns, its socket cut (1011) as a crash cuts it, and
    comes back on the same port and log: Codex opens a new socket for its next turn and sends
    the whole history on it (what the old connection held is gone), and the session goes on,
    its third turn chained on the new socket."""
    db = tmp_path / "omni.db"
    first, before = serving(codex_server, db)
    env, workdir = codex_env(
        Served(first, before, codex_server.engine, codex_server.model_dir), tmp_path
    )
    second = None
    try:
        with app_server(codex_bin, env, workdir) as codex:
            thread = start_thread(codex)
            run_turn(codex, thread, PROMPTS[0])
            first.stop()  # no graceful stop began: Hypercorn cuts the idle socket
            second, after = serving(codex_server, db, port=first.port)
            for prompt in PROMPTS[1:]:
                run_turn(codex, thread, prompt)
    finally:
        if second is not None:
            second.stop()
    check_socket(before.responses())
    socket = check_socket(after.responses())
    sent, ended = creates(socket), answers(socket)
    resent = sent[0]  # no warm-up: the session had one
    users = [
        part.get("text")
        for item in resent["input"]
        if item.get("type") == "message" and item.get("role") == "user"
        for part in item["content"]
    ]
    assert PROMPTS[0] in users and PROMPTS[1] in users
    assert "previous_response_id" not in resent
    # Then (a tool call makes a turn a request longer) chained on the new socket.
    assert [e["type"] for e in ended] == ["response.completed"] * len(sent)
    chained = [c.get("previous_response_id") for c in sent[1:]]
    ids = [e["response"]["id"] for e in ended]
    assert all(p in (None, ids[i]) for i, p in enumerate(chained)), (chained, ids)
    assert any(chained), chained
