"""A chat model sharded over two ranks on this machine's CPU (MLX's launcher, the ring backend
over loopback), as a user runs it (`omni serve --ranks 2`), tensor parallel (a tiny llama) and
pipeline parallel (a tiny Ministral 3: mlx-lm's llama does not pipeline): its greedy answers
are token for token those of the same model served whole, through chat and Responses, one at a
time and eight at once. A rank killed under a background response: the response goes on once
the ranks are loaded again; a rank stopped under a foreground one (a dropped link, for the
others): it ends failed (recorded) after --rank-timeout, the server answering meanwhile, and the
next request loads the ranks again."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from omni.runtime.chat.engine import MLXEngine
from omni.runtime.chat.ranks import named
from omni.runtime.loading.source import ModelSource
from omni.testing.llama import build_tiny_llama, build_tiny_ministral3
from tests.server import running
from tests.test_cli import serving

PROMPTS = ["hello there", "The quick brown fox", "Numbers like 12345", "The capital of France",
           "Omni records every event", "How are you today?", "lighthouse keeper",
           "one two three"]  # fmt: skip
FLAGS = ("--temp", "0", "--prompt-cache-disk-gb", "0")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Four heads and two KV heads: each rank takes half of each layer's.
    return build_tiny_llama(tmp_path_factory.mktemp("ranks") / "tiny", layers=4, hidden=64)


@pytest.fixture(scope="module")
def pipelined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_ministral3(tmp_path_factory.mktemp("ranks") / "tiny")


def chat(base: str, text: str) -> str:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 12,
            "temperature": 0}  # fmt: skip
    got = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300)
    assert got.status_code == 200, got.text
    return str(got.json()["choices"][0]["message"]["content"])


def respond(base: str, text: str) -> str:
    body = {"model": "tiny", "input": text, "max_output_tokens": 12, "temperature": 0}
    got = httpx.post(f"{base}/v1/responses", json=body, timeout=300)
    assert got.status_code == 200, got.text
    return str(got.json()["output"][0]["content"][0]["text"])


def answers(base: str) -> tuple[list[str], list[str]]:
    """Greedy answers one at a time (chat, then Responses), then eight chats at once."""
    alone = [chat(base, t) for t in PROMPTS[:3]] + [respond(base, t) for t in PROMPTS[:3]]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(lambda t: chat(base, t), PROMPTS))
    return alone, together


@pytest.mark.parametrize("sharding", ["tensor", "pipeline"])
def test_two_ranks_answer_as_the_model_served_whole(
    model: Path, pipelined: Path, tmp_path: Path, sharding: str
) -> None:
    if sharding == "pipeline":
        model = pipelined
    # The model whole, in this process (its engine in a process of its own, as always).
    engine = MLXEngine(ModelSource(str(model), "tiny"))
    engine.start()
    try:
        with running(engine, tmp_path / "whole.db") as (srv, _):
            whole = answers(srv.base_url)
    finally:
        engine.close()
    sharded = tmp_path / "sharded.db"
    flags = (*FLAGS, "--ranks", "2", "--sharding", sharding)
    with serving(model, sharded, "warning", None, *flags) as (base, proc):
        assert ranks_of(proc.pid) and len(ranks_of(proc.pid)) == 2
        assert answers(base) == whole
        # Shown: /health, /metrics and the inspector's dashboard say what the model runs on.
        said = {"count": 2, "backend": "ring", "sharding": sharding}
        assert httpx.get(f"{base}/health", timeout=30).json() == {"status": "ok", "ranks": said}
        metrics = httpx.get(f"{base}/metrics", timeout=30).text
        assert f'omni_engine_ranks{{backend="ring",sharding="{sharding}"}} 2.0' in metrics
        trends = httpx.get(f"{base}/inspect/api/trends", timeout=30).json()
        assert trends["runtime"]["ranks"] == said
    assert not ranks_of(proc.pid)  # the ranks ended with the server


def test_a_rank_that_dies_or_stops(model: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    flags = (*FLAGS, "--ranks", "2", "--rank-timeout", "3")
    with serving(model, tmp_path / "omni.db", "info", log, *flags) as (base, proc):
        # A rank killed under a background response: it goes on once the ranks are back, from
        # its recorded tokens, in the same stream.
        body = {"model": "tiny", "input": "go", "max_output_tokens": 500, "stream": True,
                "background": True, "temperature": 0}  # fmt: skip
        events = streamed(base, body, lambda: os.kill(ranks_of(proc.pid)[-1], signal.SIGKILL))
        ended = events[-1]["response"]
        assert ended["incomplete_details"] == {"reason": "max_output_tokens"}, ended["error"]
        assert ended["usage"]["output_tokens"] == 500
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == text
        # A rank stopped (a link down, for the others) under a foreground one: it ends failed
        # once the ranks have gone --rank-timeout without a step, and the server answers
        # meanwhile.
        body = {"model": "tiny", "input": "go", "max_output_tokens": 1800, "stream": True}

        def stop() -> None:
            os.kill(ranks_of(proc.pid)[-1], signal.SIGSTOP)
            assert httpx.get(f"{base}/health", timeout=30).status_code == 200

        events = streamed(base, body, stop)
        assert events[-1]["type"] == "response.failed", events[-1]
        assert "stopped answering" in events[-1]["response"]["error"]["message"]
        stored = httpx.get(f"{base}/v1/responses/{events[0]['response']['id']}", timeout=30)
        assert stored.json()["status"] == "failed"
        assert chat(base, "again")  # the model's ranks loaded again
    said = log.read_text()
    assert "the engine process exited unexpectedly" in said and "loading it again" in said
    assert "continuing resp_" in said


def streamed(base: str, body: dict[str, Any], fault: Callable[[], None]) -> list[dict[str, Any]]:
    """The events of a streamed response, `fault` done well into its generation."""
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{base}/v1/responses", json=body, timeout=300) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if len(events) == 20:
                    fault()
    return events


def ranks_of(pid: int) -> list[int]:
    """The rank processes under `pid` (the server), rank 0 first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            if _is_rank(child):
                found.append(child)
    return sorted(found, key=_rank_number)


def _is_rank(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    # A rank runs the module itself; the launcher names it among its arguments.
    return argv[1:3] == [b"-m", b"omni.runtime.chat.rank"]


def _rank_number(pid: int) -> int:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"MLX_RANK="))


def test_the_launchers_word_of_a_rank_that_exited_names_its_host() -> None:
    said = [
        "[WARN] Node with rank 1 exited with code 1",
        "Traceback ...",
        "rank 0 exited with code -15",
    ]
    assert named(said, ["mac1", "mac2"]) == (
        "rank 1 (on mac2) exited with code 1; rank 0 (on mac1) exited with code -15"
    )
    assert named(said[:1], None) == "rank 1 (on this machine) exited with code 1"
    assert named(["nothing of ranks"], None) == ""
