"""The official OpenAI Node SDK (`openai` from npm, pinned in tests/node/package-lock.json)
reads a Responses stream through keep-alives: the Python SDK's own check is in
test_resume_live.py. Needs Node.js and npm (.ci/run installs them); without, it fails."""

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


def _pinned(path: Path) -> str | None:
    try:
        return str(json.loads(path.read_text())["packages"]["node_modules/openai"]["version"])
    except (OSError, KeyError, ValueError):
        return None


@pytest.fixture(scope="session")
def node() -> str:
    """Node.js, with the pinned SDK installed in tests/node (`npm ci` when it is not)."""
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
