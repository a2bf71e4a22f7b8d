"""The official Node SDKs (`openai` and `@anthropic-ai/sdk` from npm, pinned in
tests/node/package-lock.json): OpenAI's reads a Responses stream through keep-alives (the
Python SDK's own check is in test_resume_live.py) and makes every Conversations call;
Anthropic's creates, streams, counts and meets a NotFoundError on the Messages API. Needs
Node.js and npm (.ci/run installs them); without, it fails."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.api._helpers import KEEPALIVE, MODEL, holding, wait_for
from tests.api.test_resume_live import resume

NODE_DIR = Path(__file__).parents[1] / "node"


PACKAGES = ("openai", "@anthropic-ai/sdk")


def _pinned(path: Path) -> dict[str, str] | None:
    try:
        packages = json.loads(path.read_text())["packages"]
        return {name: str(packages[f"node_modules/{name}"]["version"]) for name in PACKAGES}
    except (OSError, KeyError, ValueError):
        return None


@pytest.fixture(scope="session")
def node() -> str:
    """Node.js, with the pinned SDKs installed in tests/node (`npm ci` when they are not)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("the Node SDK tests need Node.js and npm on PATH (https://nodejs.org)")
    wanted = _pinned(NODE_DIR / "package-lock.json")
    if _pinned(NODE_DIR / "node_modules" / ".package-lock.json") != wanted:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci in {NODE_DIR} failed:\n{done.stderr}")
    return node


def test_the_node_sdk_streams_a_waiting_response_through_keepalives(node: str, server: Any) -> None:
    """A stream waiting for the engine: its first frames (with `id:`), then keep-alives,
    then the rest, read by the SDK to the end without an error."""
    body = {"model": MODEL, "input": "waiting", "max_output_tokens": 5}
    script = NODE_DIR / "stream_responses.mjs"
    with holding(server) as held:
        proc = subprocess.Popen(
            [node, str(script), f"{server.base_url}/v1", json.dumps(body)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            seen = [proc.stdout.readline().strip() for _ in range(2)]
            assert seen == ["response.created", "response.in_progress"], seen
            rid = server.call(server.state.store.by_type("response.created"))[-1].stream_id
            # A follower that came after the SDK's has had keep-alives: so has the SDK's.
            later = resume(server, rid, 1)
            assert wait_for(lambda: bytes(later.buf).count(KEEPALIVE) >= 3, timeout=15)
            held.release()  # the engine takes it now
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    seen += out.split()
    assert seen[-1] in ("response.completed", "response.incomplete"), seen
    assert "response.output_text.delta" in seen
    assert later.result().count(KEEPALIVE) >= 3


def test_the_anthropic_node_sdk_creates_streams_and_counts(node: str, server: Any) -> None:
    """The same greedy request created and streamed: finalMessage() and the text events say
    what the create said; countTokens counts the create's prompt; an unknown model is the
    SDK's NotFoundError over Anthropic's error body."""
    script = NODE_DIR / "anthropic_messages.mjs"
    done = subprocess.run(
        [node, str(script), server.base_url, MODEL],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    created, final = seen["created"], seen["final"]
    assert created["id"].startswith("msg_") and final["id"].startswith("msg_")
    assert created["id"] != final["id"]
    assert final["content"] == created["content"]
    assert [b["type"] for b in created["content"]] == ["text"]
    assert seen["text"] == created["content"][0]["text"]
    assert final["stop_reason"] == created["stop_reason"] in ("end_turn", "max_tokens")
    events = seen["events"]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    usage = created["usage"]
    assert (
        seen["counted"]["input_tokens"] == usage["input_tokens"] + usage["cache_read_input_tokens"]
    )
    refused = seen["notFound"]
    assert refused["status"] == 404
    assert refused["body"]["type"] == "error"
    assert refused["body"]["error"]["type"] == "not_found_error"


def test_the_node_sdk_holds_a_conversation(node: str, server: Any) -> None:
    """Every conversations call of the Node SDK, a response in the conversation (its turn
    then listed, paged by the SDK's own iterator), the count of its input, and
    `responses.compact` whose item goes back as the next input."""
    script = NODE_DIR / "conversations.mjs"
    done = subprocess.run(
        [node, str(script), f"{server.base_url}/v1", MODEL],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    created, response = seen["created"], seen["response"]
    cid = created["id"]
    assert cid.startswith("conv_") and created["metadata"] == {"topic": "numbers"}
    assert seen["retrieved"] == created
    assert seen["updated"] == {**created, "metadata": {"topic": "counting"}}
    assert [i["content"][0]["text"] for i in seen["added"]["data"]] == ["three"]
    assert response["conversation"] == {"id": cid}
    assert seen["counted"]["input_tokens"] == response["usage"]["input_tokens"]
    turn = [o["id"] for o in response["output"]]
    assert len(seen["paged"]) == 4 + len(turn) and seen["paged"][-len(turn) :] == turn
    assert seen["first"]["id"] == seen["paged"][0]
    assert seen["afterDelete"] == seen["updated"]
    assert seen["left"] == seen["paged"][1:]
    assert seen["deleted"] == {"id": cid, "object": "conversation.deleted", "deleted": True}
    assert seen["notFound"] == {"status": 404, "name": "NotFoundError"}
    compacted, went_on = seen["compacted"], seen["wentOn"]
    assert compacted["object"] == "response.compaction"
    assert [i["type"] for i in compacted["output"]] == ["compaction"]
    assert went_on["status"] == "incomplete" and went_on["output"][0]["type"] == "message"
