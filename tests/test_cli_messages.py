"""Messages (Anthropic's API) on the log side, on a real `omni serve`'s log: the replay cache
answers an identical deterministic message (x-omni-cache: hit, the same content), and
`omni ls --kind message | show | replay | tail | stats` and the web inspector's data read
messages as a person reads completions: a tool-use conversation's system, blocks and
answer, its usage; a streamed message's bytes as its client got them."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from omni.vocabulary import MESSAGE_ENDS
from tests.test_cli import omni, serving

MODEL = "tiny-llama"
SYSTEM = "You answer with tools."
TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
CONVERSATION: list[Any] = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
    },  # fmt: skip
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "22°C, sunny"}],
    },
]


@dataclass
class Served:
    base: str
    db: Path
    tools: Any  # the SDK's Message for the tool-use conversation
    first: httpx.Response  # a deterministic message, then its twin
    twin: httpx.Response
    stream: bytes  # a streamed message's bytes (pings aside)


def _without_pings(raw: bytes) -> bytes:
    frames = [f for f in raw.split(b"\n\n") if f and not f.startswith(b"event: ping")]
    return b"".join(f + b"\n\n" for f in frames)


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = tmp_path_factory.mktemp("messages") / "omni.db"
    with serving(tiny_model_dir, db) as (base, _):
        client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
        tools = client.messages.create(
            model=MODEL, max_tokens=12, system=SYSTEM, tools=TOOLS,  # type: ignore[arg-type]
            messages=CONVERSATION,
        )  # fmt: skip
        same = {
            "model": MODEL,
            "max_tokens": 8,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Say the same thing twice."}],
        }
        with httpx.Client(base_url=base, timeout=60) as http:
            first, twin = (http.post("/v1/messages", json=same) for _ in range(2))
            body = {"model": MODEL, "max_tokens": 10, "stream": True,
                    "messages": [{"role": "user", "content": "Stream it."}]}  # fmt: skip
            with http.stream("POST", "/v1/messages", json=body) as res:
                assert res.status_code == 200
                raw = b"".join(res.iter_bytes())
        client.close()
        yield Served(base, db, tools, first, twin, _without_pings(raw))


def _id(raw: bytes) -> str:
    data = next(line for line in raw.split(b"\n") if line.startswith(b"data: "))
    return str(json.loads(data[6:])["message"]["id"])


def test_an_identical_deterministic_message_is_answered_from_the_cache(served: Served) -> None:
    first, twin = served.first, served.twin
    assert first.status_code == twin.status_code == 200, twin.text
    assert first.headers["x-omni-cache"] == "miss"
    assert twin.headers["x-omni-cache"] == "hit"
    a, b = first.json(), twin.json()
    assert a["id"] != b["id"] and a["id"].startswith("msg_") and b["id"].startswith("msg_")
    assert b["content"] == a["content"] and b["stop_reason"] == a["stop_reason"]
    assert b["usage"] == a["usage"]
    with sqlite3.connect(f"{served.db.absolute().as_uri()}?mode=ro", uri=True) as conn:
        indexed = [r[0] for r in conn.execute("SELECT completion_id FROM chat_cache")]
    assert a["id"] in indexed and b["id"] not in indexed  # the index answered; a copy is none
    shown = json.loads(omni("show", b["id"], "--db", str(served.db), "--json").stdout)
    assert shown["replay_of"] == a["id"]


def test_show_reads_a_tool_use_conversation(served: Served) -> None:
    message = served.tools
    result = omni("show", message.id, "--db", str(served.db), "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["summary"]["kind"] == "message"
    assert shown["summary"]["status"] == "completed"
    request = shown["request"]
    assert request["instructions"] == SYSTEM
    assert [t["name"] for t in request["tools"]] == ["get_weather"]  # whole, schema too
    assert [(i["type"], i["role"], i["text"]) for i in request["input"]] == [
        ("message", "user", "Weather in Paris?"),
        ("message", "assistant", 'Let me look. get_weather({"city": "Paris"})'),
        ("message", "user", "22°C, sunny"),
    ]
    assert [p["type"] for p in request["input"][1]["parts"]] == ["text", "tool_call"]
    assert [p["type"] for p in request["input"][2]["parts"]] == ["tool_result"]
    text = "".join(b.text for b in message.content if b.type == "text")
    calls = [(b.name, b.input, b.id) for b in message.content if b.type == "tool_use"]
    assert shown["output_text"] == text
    assert [(c["name"], json.loads(c["arguments"]), c["call_id"]) for c in shown["tool_calls"]] == (
        calls
    )
    usage = message.usage
    prompt = usage.input_tokens + (usage.cache_read_input_tokens or 0)
    assert shown["usage"]["input_tokens"] == prompt
    assert shown["usage"]["output_tokens"] == usage.output_tokens
    assert shown["finish_reason"] == message.stop_reason
    table = omni("show", message.id, "--db", str(served.db)).stdout
    assert "message " + message.id in table and "message\tuser\t22°C, sunny" in table


def test_ls_stats_and_the_web_inspector_list_messages(served: Served) -> None:
    listed = omni("ls", "--db", str(served.db), "--kind", "message")
    assert listed.returncode == 0, listed.stderr
    ids = [line.split("\t")[0] for line in listed.stdout.splitlines()[1:]]
    made = [served.tools.id, served.first.json()["id"], served.twin.json()["id"]]
    assert ids == [_id(served.stream), *reversed(made)]
    stats = json.loads(omni("stats", "--db", str(served.db), "--json").stdout)
    assert stats["by_kind"] == {"message": 4}
    recent = httpx.get(f"{served.base}/inspect/api/recent", timeout=30).json()["data"]
    assert [r["id"] for r in recent] == ids and {r["kind"] for r in recent} == {"message"}
    detail = httpx.get(f"{served.base}/inspect/api/{served.tools.id}", timeout=30).json()
    assert detail["request"]["instructions"] == SYSTEM


def test_replay_and_tail_of_a_streamed_message(served: Served) -> None:
    mid = _id(served.stream)
    replay = subprocess.run(
        [sys.executable, "-m", "omni", "replay", mid, "--db", str(served.db)],
        capture_output=True,
        timeout=60,
    )
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout == served.stream
    tail = omni("tail", mid, "--db", str(served.db), timeout=60)  # ends with the message
    assert tail.returncode == 0, tail.stderr
    rows = [line.split("\t") for line in tail.stdout.splitlines()]
    public = [r for r in rows if r[1] == mid]
    assert public[0][3] == "message_start" and public[-1][3] in MESSAGE_ENDS
    assert len(public) == served.stream.count(b"event: ")
    sent = [
        json.loads(f.split(b"data: ", 1)[1].split(b"\n")[0])
        for f in served.stream.split(b"\n\n")
        if f
    ]
    texts = "".join(e["delta"].get("text", "") for e in sent if e["type"] == "content_block_delta")
    assert "".join(r[4] for r in public if r[3] == "content_block_delta") == texts
