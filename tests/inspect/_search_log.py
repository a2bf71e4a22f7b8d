"""A log written by hand for the search tests: one object of each kind that has text, by two
owners, a second apart, each with words of its own in its input and its output."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from alembic import command

from omni.db import alembic_config

T0 = 1_796_000_000_000  # unix ms of the first object
Event = tuple[str, int, str, dict[str, Any]]


def _response(rid: str, asked: str, said: str, status: str = "completed") -> list[Event]:
    body = {"model": "m-large", "instructions": "Answer in verse."}  # its input kept beside
    image = "data:image/png;base64,c2VjcmV0aW1hZ2U="
    content = [{"type": "input_text", "text": asked}, {"type": "input_image", "image_url": image}]
    items = [{"type": "message", "role": "user", "content": content}]
    response = {"id": rid, "status": "in_progress", "model": "m-large", "store": True}
    output = [{"type": "message", "content": [{"type": "output_text", "text": said}]}]
    usage = {"input_tokens": 10, "output_tokens": 40}
    ended = {**response, "status": status, "output": output, "usage": usage}
    return [
        (f"{rid}/request", 0, "omni.request.accepted",
         {"kind": "response", "body": body, "input": items, "response": response,
          "owner": "alice", "plan": {"instructions": "a plan's words, not the request's"}}),
        (rid, 0, "response.in_progress", {"response": response}),
        (rid, 1, f"response.{status}", {"response": ended}),
    ]  # fmt: skip


def _chat(cid: str, asked: str, words: list[str]) -> list[Event]:
    body = {
        "model": "m-small",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": asked},
        ],
    }
    chunks: list[Event] = [
        (cid, k, "chat.completion.chunk", {"choices": [{"delta": {"content": w}}]})
        for k, w in enumerate(["", *words])
    ]
    usage = {"usage": {"prompt_tokens": 5, "completion_tokens": len(words)}}
    return [
        (f"{cid}/request", 0, "omni.request.accepted",
         {"kind": "chat", "body": body, "owner": "bob"}),
        *chunks,
        (cid, len(chunks), "chat.completion.usage", usage),
    ]  # fmt: skip


def _text(cid: str, prompts: list[str], said: str) -> list[Event]:
    body = {"model": "m-small", "prompt": prompts}
    return [
        (f"{cid}/request", 0, "omni.request.accepted",
         {"kind": "text", "body": body, "owner": "bob"}),
        (cid, 0, "text_completion.chunk", {"choices": [{"text": said}]}),
        (cid, 1, "text_completion.usage", {"usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
    ]  # fmt: skip


def _message(mid: str, system: str, asked: str, said: str) -> list[Event]:
    body = {
        "model": "m-large",
        "system": [{"type": "text", "text": system}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": asked}]}],
    }
    return [
        (f"{mid}/request", 0, "omni.request.accepted",
         {"kind": "message", "body": body, "owner": "alice"}),
        (mid, 0, "message_start", {}),
        (mid, 1, "content_block_delta", {"delta": {"type": "text_delta", "text": said}}),
        (mid, 2, "message_stop", {}),
    ]  # fmt: skip


def _asked(kind: str, oid: str, body: dict[str, Any], ends: list[Event]) -> list[Event]:
    accepted = {"kind": kind, "body": body, "owner": "alice"}
    return [(f"{oid}/request", 0, "omni.request.accepted", accepted), *ends]


OBJECTS: list[list[Event]] = [
    _response("resp_first", "Tell me of the heron", "A grey heron waits", "completed"),
    _chat("chatcmpl-one", "What is a kestrel?", ["A small ", "falcon."]),
    _text("cmpl-one", ["Once upon", "a lighthouse"], " keeper slept"),
    _message("msg_one", "You are a sailor.", "Where is the Café Müller?", "By the harbour."),
    _asked("speech", "speech_one", {"model": "tts", "input": "Hello from the orchard"}, []),
    _asked("image", "img_one", {"model": "draw", "prompt": "a violet teapot"}, []),
    _asked(
        "transcription",
        "tr_one",
        {"model": "whisper"},
        [("tr_one", 0, "transcript.text.done", {"text": "the tide is turning"})],
    ),
    _response("resp_failed", "Tell me of the otter", "", "failed"),
    _response("resp_last", "Tell me of the heron again", "Herons again, and a wren"),
]
IDS = [o[0][0].removesuffix("/request") for o in OBJECTS]


def write(path: Path, revision: str = "head") -> None:
    """The log at `path`, migrated to `revision`, then written event by event."""
    command.upgrade(alembic_config(str(path)), revision)
    with sqlite3.connect(path) as conn:
        for n, events in enumerate(OBJECTS):
            for k, (stream, seq, type_, data) in enumerate(events):
                conn.execute(
                    "INSERT INTO events (stream_id, seq, type, data, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (stream, seq, type_, json.dumps(data), T0 + 1000 * n + 10 * k * (n + 1)),
                )
