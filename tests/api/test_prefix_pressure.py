"""A coding agent's session keeps its long prefix in the prefix cache while one-off prompts pass
through, as the issue has it (an 8 k-token prefix, 50 prompts of 2 k tokens), scaled to the
tiny model: a ~1 k-token session, 50 one-off prompts of ~150 tokens, and a memory tier with room
for the session and a few prompts. The one-offs leave in each other's stead; the session's next
turn reads its whole prefix from memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from omni.api.app import Settings
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.source import ModelSource
from tests.conftest import TINY_ID
from tests.server import ServerThread

PER_TOKEN = 2 * 2 * 16 * 2 * 4  # the tiny llama's KV: layers, kv heads, head dim, k and v, f32
ROOM = 2 * 1280 * PER_TOKEN  # the session's entry (its buffers grow 256 tokens at a time), twice
PREFIX = "You are a coding agent; the workspace holds a lighthouse log. " * 16
ONE_OFFS = 50


@pytest.fixture(scope="module")
def client(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    engine = MLXEngine(ModelSource(str(tiny_model_dir), TINY_ID), prompt_cache_bytes=ROOM)
    engine.start()
    db = tmp_path_factory.mktemp("pressure") / "omni.db"
    srv = ServerThread(Settings(db_path=str(db)), engine).start()
    yield OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0)
    srv.stop()
    engine.close()


def ask(client: OpenAI, **fields: Any) -> Any:
    return client.responses.create(model=TINY_ID, max_output_tokens=1, temperature=0, **fields)


def test_a_session_keeps_its_prefix_while_one_off_prompts_pass(client: OpenAI) -> None:
    # Its first turn says it is a session as Codex does: a prompt_cache_key (its session id).
    session = {"instructions": PREFIX, "prompt_cache_key": "session-1"}
    first = ask(client, **session, input="Read the log.")
    one_offs = [
        ask(client, input=f"One-off question number {i}: " + "what is a lighthouse? " * 6)
        for i in range(ONE_OFFS)
    ]
    assert first.usage is not None and all(r.usage for r in one_offs)
    again = ask(client, input=one_offs[0].output_text or "x", previous_response_id=one_offs[0].id)
    assert again.usage is not None
    # The memory was under pressure: the first one-off's cache left for the later ones.
    assert again.usage.input_tokens_details.cached_tokens < one_offs[0].usage.input_tokens // 2  # type: ignore[union-attr]
    then = ask(client, **session, input="Next step.", previous_response_id=first.id)
    assert then.usage is not None
    seen = first.usage.input_tokens + first.usage.output_tokens
    assert then.usage.input_tokens_details.cached_tokens >= seen - 2
