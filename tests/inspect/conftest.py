"""A real server's real log for the inspector's tests: a tiny llama behind two API keys, the
OpenAI SDK (and raw HTTP, for the bytes) making responses and completions of every kind."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from omni.api.app import Settings
from omni.api.gate import Access
from omni.api.keys import KeyRing, api_key
from tests.api._helpers import MODEL, UNENDING, post_stream, strip_keepalives
from tests.server import ServerThread

KEY_A = "sk-alice-" + "a" * 24
KEY_B = "sk-bob-" + "b" * 24


@dataclass
class Log:
    """What the clients were told, beside the log that recorded it."""

    db: Path
    server: ServerThread
    streamed: dict[str, Any]  # the terminal response of a streamed create
    raw: bytes  # its SSE bytes, as the client received them (keep-alives aside)
    chat_raw: bytes  # a streamed chat completion's bytes
    chat_id: str
    responses: dict[str, Any] = field(default_factory=dict)  # name → SDK Response
    chats: dict[str, Any] = field(default_factory=dict)  # name → SDK ChatCompletion
    cache_hit: str = ""  # the chat completion the replay cache answered

    def rows(self, query: str, *args: Any) -> list[sqlite3.Row]:
        with sqlite3.connect(self.db) as conn:
            conn.row_factory = sqlite3.Row
            return conn.execute(query, args).fetchall()


def _sdk(srv: ServerThread, key: str) -> OpenAI:
    return OpenAI(
        base_url=f"{srv.base_url}/v1", api_key=key, max_retries=0, _strict_response_validation=True
    )


def _wait(client: OpenAI, rid: str) -> Any:
    deadline = time.monotonic() + 60
    while (got := client.responses.retrieve(rid)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, f"{rid} did not finish"
        time.sleep(0.05)
    return got


@pytest.fixture(scope="module")
def log(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Log]:
    db = tmp_path_factory.mktemp("inspect") / "omni.db"
    access = Access(keys=KeyRing([api_key(KEY_A, "alice"), api_key(KEY_B, "bob")]))
    srv = ServerThread(Settings(db_path=str(db), keepalive=1.0, access=access), tiny_engine)
    srv.start()
    alice, bob = _sdk(srv, KEY_A), _sdk(srv, KEY_B)
    headers = {"authorization": f"Bearer {KEY_A}"}
    try:
        with httpx.Client(base_url=srv.base_url, timeout=30, headers=headers) as http:
            body = {"model": MODEL, "input": "Stream me, please.", "max_output_tokens": 12}
            _, raw, frames = post_stream(http, body)
            chat_body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Chat with me."}],
                "max_tokens": 8,
                "store": True,
                "stream_options": {"include_usage": True},
            }
            _, chat_raw = _chat_stream(http, chat_body)
        log = Log(db, srv, frames[-1].data["response"], strip_keepalives(raw), chat_raw, "")
        log.chat_id = _chat_id(chat_raw)
        r = log.responses
        r["plain"] = alice.responses.create(model=MODEL, input="Hello there", max_output_tokens=6)
        r["chained"] = alice.responses.create(
            model=MODEL, input="And then?", previous_response_id=r["plain"].id,
            max_output_tokens=5, instructions="Be brief.", temperature=0.5,
        )  # fmt: skip
        r["bob"] = bob.responses.create(model=MODEL, input="Bob asks", max_output_tokens=4)
        bg = alice.responses.create(model=MODEL, input="bg", max_output_tokens=6, background=True)
        r["background"] = _wait(alice, bg.id)
        long = alice.responses.create(  # unending: it is still going when cancelled
            model=MODEL, input="long", max_output_tokens=5000, background=True,
            extra_body=UNENDING,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while alice.responses.retrieve(long.id).status == "queued":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        alice.responses.cancel(long.id)
        r["cancelled"] = _wait(alice, long.id)
        r["deleted"] = alice.responses.create(model=MODEL, input="gone", max_output_tokens=3)
        alice.responses.delete(r["deleted"].id)
        c = log.chats
        det = {"model": MODEL, "messages": [{"role": "user", "content": "same"}], "max_tokens": 6}
        c["stored"] = alice.chat.completions.create(**det, temperature=0, store=True)
        hit = alice.chat.completions.with_raw_response.create(**det, temperature=0, store=True)
        assert hit.headers["x-omni-cache"] == "hit"
        c["hit"] = hit.parse()
        c["unstored"] = alice.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "forget me"}],
            max_tokens=4,
            store=False,
        )
        # The server purges an unstored completion once its client has read it, just after
        # the answer went out: wait for that, so the tests see the log at rest.
        deadline = time.monotonic() + 30
        while log.rows("SELECT 1 FROM events WHERE stream_id = ?", c["unstored"].id):
            assert time.monotonic() < deadline, "the unstored completion was not purged"
            time.sleep(0.02)
        yield log
    finally:
        alice.close()
        bob.close()
        srv.stop()


def _chat_stream(http: httpx.Client, body: dict[str, Any]) -> tuple[int, bytes]:
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as res:
        raw = b"".join(res.iter_bytes())
    return res.status_code, strip_keepalives(raw)


def _chat_id(raw: bytes) -> str:
    import json

    first = raw.split(b"\n\n")[0]
    return str(json.loads(first[len(b"data: ") :])["id"])
