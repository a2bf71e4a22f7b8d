"""A chat model sharded over ranks on this machine's CPU (MLX's launcher, the ring backend over
loopback), as a user runs it (`omni serve --ranks N`): two ranks, tensor parallel and pipeline
parallel (a tiny llama, and a tiny Ministral 3: mlx-lm's llama does not pipeline), and four both
ways where OMNI_TEST_FOUR_RANKS is set (FOUR). Its answers are token for token those of the same
model served whole: greedy through chat and Responses, a seeded sample, a structured output, one
at a time and eight at once (four ranks: a chat and a response); the prefix cache serves a
prompt asked again, and a cancel reaches every rank. Faults, on the two tensor parallel ranks
(from a host file) once compared: a rank killed under a background response, which goes on once
the ranks are loaded again; a rank stopped (a dropped link, for the others), under which a
foreground response ends failed (recorded) after --rank-timeout, the server answering meanwhile."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from omni.cli.program import parser
from omni.cli.serve import ranks as serve_ranks
from omni.errors import OmniError
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.chat.rank import heads_divide
from omni.runtime.chat.ranks import named
from omni.runtime.loading.source import ModelSource
from omni.testing.llama import build_tiny_llama, build_tiny_ministral3
from tests.server import running
from tests.test_cli import serving

PROMPTS = ["hello there", "The quick brown fox", "Numbers like 12345", "The capital of France",
           "Omni records every event", "How are you today?", "lighthouse keeper",
           "one two three"]  # fmt: skip
FLAGS = ("--temp", "0", "--prompt-cache-disk-gb", "0")
# The models' context: long enough that a response cancelled (or its rank killed) as its first
# delta comes is still running when the cancel lands. Under a loaded CI machine's disk a commit
# of the log can take seconds, the engine running ahead meanwhile: a budget of 1,800 tokens
# was once all generated before the client read its first delta.
CONTEXT = 16384
LONG_BUDGET = CONTEXT - 256
DELTA = "response.output_text.delta"
CONTINUED = re.compile(r"continuing resp_\w+ after (\d+) recorded tokens")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Four heads and two KV heads: each rank takes half of each layer's.
    folder = tmp_path_factory.mktemp("ranks") / "tiny"
    return build_tiny_llama(folder, layers=4, hidden=64, context=CONTEXT)


@pytest.fixture(scope="module")
def pipelined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_ministral3(tmp_path_factory.mktemp("ranks") / "tiny", context=CONTEXT)


def chat(base: str, text: str, **options: Any) -> str:
    return str(chatted(base, text, **options)["choices"][0]["message"]["content"])


def chatted(base: str, text: str, **options: Any) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 8,
            "temperature": 0, **options}  # fmt: skip
    got = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300)
    assert got.status_code == 200, got.text
    return dict(got.json())


def respond(base: str, text: str) -> str:
    body = {"model": "tiny", "input": text, "max_output_tokens": 8, "temperature": 0}
    got = httpx.post(f"{base}/v1/responses", json=body, timeout=300)
    assert got.status_code == 200, got.text
    return str(got.json()["output"][0]["content"][0]["text"])


YES_OR_NO = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True,
             "schema": {"type": "string", "enum": ["yes", "no"]}}}  # fmt: skip
SAMPLED = {"temperature": 0.9, "top_p": 0.9, "seed": 7, "logit_bias": {"5": 3}}


def answers(base: str) -> tuple[list[str], list[str]]:
    """Greedy answers one at a time (chat, then Responses), a seeded sample and a structured
    output, then eight chats at once."""
    alone = [chat(base, t) for t in PROMPTS[:3]] + [respond(base, t) for t in PROMPTS[:3]]
    alone += [chat(base, "pick", **SAMPLED), chat(base, "yes?", response_format=YES_OR_NO)]
    assert alone[-1] in ('"yes"', '"no"')
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        return alone, list(pool.map(lambda t: chat(base, t), PROMPTS))


@dataclass
class Hosted:
    base: str
    proc: subprocess.Popen[str]
    log: Path


@pytest.fixture(scope="module")
def hosted(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosted]:
    """The tiny llama over two tensor parallel ranks from a host file, as across machines
    (mlx.launch runs 127.0.0.1's here): its answers are compared, then its faults made."""
    folder = tmp_path_factory.mktemp("hosted")
    hosts, log = folder / "hosts.json", folder / "serve.log"
    hosts.write_text(json.dumps([{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2))
    flags = (*FLAGS, "--hostfile", str(hosts), "--rank-timeout", "3")
    with serving(model, folder / "omni.db", "info", log, *flags) as (base, proc):
        yield Hosted(base, proc, log)
    assert not ranks_of(proc.pid)  # the ranks ended with the server


@pytest.fixture(scope="module")
def wholes() -> dict[Path, tuple[list[str], list[str]]]:
    return {}  # each model's answers served whole, by its folder


# Four ranks, both ways (the Ministral 3 has four heads of keys and values): they pass, and
# take 18 s of the suite's 8 minutes on two cores, so they run where OMNI_TEST_FOUR_RANKS is set.
FOUR = [("tensor", 4, "ministral3"), ("pipeline", 4, "ministral3")]


@pytest.mark.parametrize(
    ("sharding", "count", "kind"),
    [
        ("tensor", 2, "llama"),
        ("pipeline", 2, "ministral3"),
        *(FOUR if os.environ.get("OMNI_TEST_FOUR_RANKS") else []),
    ],  # fmt: skip
)
def test_ranks_answer_as_the_model_served_whole(
    model: Path,
    pipelined: Path,
    wholes: dict[Path, tuple[list[str], list[str]]],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    sharding: str,
    count: int,
    kind: str,
) -> None:
    if kind == "ministral3":
        model = pipelined
    if model not in wholes:  # the model whole, in this process (its engine in its own)
        engine = MLXEngine(ModelSource(str(model), "tiny"))
        engine.start()
        try:
            with running(engine, tmp_path / "whole.db") as (srv, _):
                wholes[model] = answers(srv.base_url)
        finally:
            engine.close()
    whole = wholes[model]
    if kind == "llama":  # the host file's server, which the fault test goes on with
        server: Hosted = request.getfixturevalue("hosted")
        check_served(server.base, server.proc, whole, sharding, count)
        return
    flags = (*FLAGS, "--ranks", str(count), "--sharding", sharding)
    with serving(model, tmp_path / "sharded.db", "warning", None, *flags) as (base, proc):
        check_served(base, proc, whole, sharding, count)
    assert not ranks_of(proc.pid)  # the ranks ended with the server


def check_served(
    base: str,
    proc: subprocess.Popen[str],
    whole: tuple[list[str], list[str]],
    sharding: str,
    count: int,
) -> None:
    assert len(ranks_of(proc.pid)) == count
    if count == 2:
        served_alike(base, whole)
    else:  # four ranks on two cores are slow: a greedy chat and response
        assert [chat(base, PROMPTS[0]), respond(base, PROMPTS[0])] == [whole[0][0], whole[0][3]]
    # Shown: /health, /metrics and the inspector's dashboard say what the model runs on.
    said = {"count": count, "backend": "ring", "sharding": sharding}
    assert httpx.get(f"{base}/health", timeout=30).json() == {"status": "ok", "ranks": said}
    metrics = httpx.get(f"{base}/metrics", timeout=30).text
    assert f'omni_engine_ranks{{backend="ring",sharding="{sharding}"}} {count}.0' in metrics
    trends = httpx.get(f"{base}/inspect/api/trends", timeout=30).json()
    assert trends["runtime"]["ranks"] == said


def served_alike(base: str, whole: tuple[list[str], list[str]]) -> None:
    """The sharded model's answers are the whole one's; its prefix cache and cancel work."""
    assert answers(base) == whole
    # The prefix cache: a prompt asked again (for fewer tokens: not the replay cache's)
    # is read from it.
    again = chatted(base, PROMPTS[0], max_tokens=4)["usage"]["prompt_tokens_details"]
    assert again["cached_tokens"] > 0
    # A cancel (of a background response, as its first delta comes) reaches every rank alike.
    body = {"model": "tiny", "input": "go", "max_output_tokens": LONG_BUDGET,
            "background": True, "stream": True}  # fmt: skip

    answered: list[dict[str, Any]] = []

    def cancel(events: list[dict[str, Any]]) -> None:
        if first_delta(events):
            rid = events[0]["response"]["id"]
            got = httpx.post(f"{base}/v1/responses/{rid}/cancel", timeout=60)
            assert got.status_code == 200, got.text
            answered.append(got.json())  # (a response that ended first is answered unchanged)

    events = streamed(base, body, cancel)
    ended = events[-1]["response"]  # (its event is response.incomplete: the SDK's)
    assert ended["status"] == "cancelled", (ended["status"], ended["usage"])
    assert answered[0]["status"] == "cancelled"
    assert ended["usage"]["output_tokens"] < LONG_BUDGET
    assert chat(base, PROMPTS[1]) == whole[0][1]  # the ranks still in step


def test_a_rank_that_dies_or_stops(hosted: Hosted) -> None:
    base, proc = hosted.base, hosted.proc
    # A rank killed under a background response (its first delta read: generating, however
    # long the log's commits took on a loaded machine): it goes on once the ranks are back,
    # from its recorded tokens, in the same stream; cancelled once it has made more.
    body = {"model": "tiny", "input": "go", "max_output_tokens": LONG_BUDGET, "stream": True,
            "background": True, "temperature": 0}  # fmt: skip
    recorded: list[int] = []  # the tokens it went on after, as the server said

    def kill_then_cancel(events: list[dict[str, Any]]) -> None:
        if first_delta(events):
            os.kill(ranks_of(proc.pid)[-1], signal.SIGKILL)
        if not recorded and (went_on := CONTINUED.search(hosted.log.read_text())):
            recorded.append(int(went_on[1]))
        if recorded and deltas(events) == recorded[0] + 10:  # (a delta is a token at most)
            rid = events[0]["response"]["id"]
            httpx.post(f"{base}/v1/responses/{rid}/cancel", timeout=60)

    events = streamed(base, body, kill_then_cancel)
    ended = events[-1]["response"]
    assert ended["status"] == "cancelled", (ended["status"], ended["error"])
    assert ended["usage"]["output_tokens"] >= recorded[0] + 10
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    text = "".join(e["delta"] for e in events if e["type"] == DELTA)
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == text
    said = hosted.log.read_text()
    assert "the engine process exited unexpectedly" in said and "loading it again" in said
    # A rank stopped (a link down, for the others): the foreground response asked of the ranks
    # ends failed once they have gone --rank-timeout without a step, the server answering
    # meanwhile.
    os.kill(ranks_of(proc.pid)[-1], signal.SIGSTOP)
    assert httpx.get(f"{base}/health", timeout=30).status_code == 200
    body = {"model": "tiny", "input": "go", "max_output_tokens": 1800, "stream": True}
    events = streamed(base, body)
    assert events[-1]["type"] == "response.failed", events[-1]
    assert "stopped answering" in events[-1]["response"]["error"]["message"]
    stored = httpx.get(f"{base}/v1/responses/{events[0]['response']['id']}", timeout=30)
    assert stored.json()["status"] == "failed"


def streamed(
    base: str, body: dict[str, Any], each: Callable[[list[dict[str, Any]]], None] | None = None
) -> list[dict[str, Any]]:
    """The events of a streamed response, `each` given those read so far after every one."""
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{base}/v1/responses", json=body, timeout=300) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if each is not None:
                    each(events)
    return events


def deltas(events: list[dict[str, Any]]) -> int:
    return sum(e["type"] == DELTA for e in events)


def first_delta(events: list[dict[str, Any]]) -> bool:
    """The event just read is the first text delta: its generation under way, most of it
    still to come."""
    return events[-1]["type"] == DELTA and deltas(events) == 1


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


def test_heads_that_do_not_divide_among_the_ranks_are_refused(tmp_path: Path) -> None:
    """Tensor parallel over ranks that do not divide a layer's heads would load, then fail
    every request (mlx-lm divides them with no remainder check): refused at the load, saying
    which rank counts would do."""
    config = {"num_attention_heads": 9, "num_key_value_heads": 3}  # SmolLM2-135M's
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"9 attention heads and 3 heads of keys and values "
                       r"do not divide by 2: --ranks 3 would split them"):  # fmt: skip
        heads_divide(tmp_path, 2)
    heads_divide(tmp_path, 3)
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_attention_heads": 5}}))
    with pytest.raises(ValueError, match=r"5 attention heads do not divide by 2: --ranks 5"):
        heads_divide(tmp_path, 2)


def test_a_host_file_is_read_as_mlx_launch_reads_it(tmp_path: Path) -> None:
    """Its list form, and the form mlx.distributed_config writes (its backend and its hosts):
    the backend is the flag's, else the host file's, else MLX's for this machine; a host
    file that cannot be read is one line."""
    listed, written = tmp_path / "listed.json", tmp_path / "written.json"
    hosts = [{"ssh": "mac1", "ips": ["10.0.0.1"]}, {"ssh": "mac2", "ips": ["10.0.0.2"]}]
    listed.write_text(json.dumps(hosts))
    written.write_text(json.dumps({"backend": "jaccl", "envs": [], "hosts": hosts}))

    def read(*argv: str) -> Any:
        return serve_ranks(parser().parse_args(["serve", *argv]))

    got = read("--hostfile", str(written))
    assert (got.count, got.backend, got.hosts) == (2, "jaccl", ("mac1", "mac2"))
    assert read("--hostfile", str(listed)).backend == "ring"  # this CPU's
    assert read("--hostfile", str(written), "--distributed-backend", "ring").backend == "ring"
    assert read("--ranks", "3").backend == "ring" and read("--ranks", "1") is None
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(OmniError, match="--hostfile: Failed to parse hostfile"):
        read("--hostfile", str(tmp_path / "bad.json"))
