"""A Codex session that compacts on Omni, and goes on after the server is killed (`kill -9`).

Codex compacts remotely only for a provider it takes for OpenAI's or Azure's: a custom
provider named `azure` is one. Its compaction is a Responses create (here over the WebSocket)
whose input ends with `compaction_trigger`; Omni answers with one `compaction` item, which
Codex keeps in place of the history and sends back on the next turn. A small
`model_auto_compact_token_limit` makes each turn after the first compact before it runs.

The server is a real `omni serve` process on test_codex_cli's one-layer model, greedy. Between
the second and third turns it is killed with SIGKILL and started again on the same port, log
and home: the third turn (a new `codex exec resume`) sends the compaction item the killed
process sealed, which the new process opens with the key kept in OMNI_HOME, and compacts it
again. Codex sends `store: false`: what the log held of each turn is purged once read, and
what the kill left is purged at the next start."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

from tests.agents.cli import run_cli
from tests.agents.test_codex_cli import SCHEMA, UNKNOWN_MODEL, codex_bin, codex_model
from tests.agents.test_codex_websocket import PROMPTS, TURN_TIMEOUT, socket_config
from tests.server import free_port
from tests.test_cli import serving

__all__ = ["codex_bin"]  # the fixture, served to this module too

COMPACT_AT = 5000  # tokens: Codex's first request is ~16,000 of the tiny tokenizer


def compacting_config(base_url: str) -> str:
    config = socket_config(base_url)
    for old, new in (
        ('name = "Omni"', 'name = "azure"'),  # a provider Codex compacts on remotely
        (
            "check_for_update_on_startup = false\n",
            f"model_auto_compact_token_limit = {COMPACT_AT}\n",
        ),
    ):
        assert old in config
        config = config.replace(old, new)
    return "check_for_update_on_startup = false\n" + config


def codex_turn(codex: Path, env: dict[str, str], tmp_path: Path, i: int) -> list[dict[str, Any]]:
    """Turn `i` of the session (a resume after the first), checked to have completed."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    flags = ["--strict-config", "--skip-git-repo-check", "--sandbox", "read-only", "--json"]
    resume = ["resume", "--last"] if i else []
    cmd = [str(codex), "exec", *flags, *resume, "--output-schema", str(schema), PROMPTS[i]]
    done, report = run_cli(cmd, tmp_path / "work", env, TURN_TIMEOUT)
    assert done.returncode == 0, report
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert events[-1]["type"] == "turn.completed", report
    errors = [e["item"] for e in events if e.get("item", {}).get("type") == "error"]
    assert all(UNKNOWN_MODEL in e["message"] for e in errors), report
    return events


def compactions(codex_home: Path) -> list[list[dict[str, Any]]]:
    """The histories Codex put in place of its session's at each compaction (its rollout)."""
    [rollout] = (codex_home / "sessions").rglob("rollout-*.jsonl")
    records = [json.loads(line) for line in rollout.read_text().splitlines()]
    return [r["payload"]["replacement_history"] for r in records if r["type"] == "compacted"]


def test_a_codex_session_compacts_and_goes_on_after_kill_9(codex_bin: Path, tmp_path: Path) -> None:
    model = codex_model(tmp_path / "models")
    db, port = tmp_path / "omni.db", free_port()
    home, codex_home = tmp_path / "home", tmp_path / "home" / ".codex"
    for d in (codex_home, tmp_path / "work"):
        d.mkdir(parents=True)
    (codex_home / "config.toml").write_text(compacting_config(f"http://127.0.0.1:{port}"))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "OMNI_TEST_API_KEY": "dummy",
    }
    omni_env = {"OMNI_HOME": str(tmp_path / "omni-home")}  # the sealing key, across the kill
    serve = (model, db, "warning", tmp_path / "serve.log", "--temp", "0")
    with serving(*serve, env=omni_env, port=port) as (_, proc):
        codex_turn(codex_bin, env, tmp_path, 0)
        codex_turn(codex_bin, env, tmp_path, 1)  # compacts first
        before = compactions(codex_home)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with serving(*serve, env=omni_env, port=port):
        codex_turn(codex_bin, env, tmp_path, 2)  # sends the item sealed before the kill
    after = compactions(codex_home)

    assert len(before) == 1 and len(after) == 2, after
    items = [[i for i in history if i.get("type") == "compaction"] for history in after]
    assert [len(found) for found in items] == [1, 1]
    assert all(found[0]["id"].startswith("cmp_") for found in items)
    assert items[0][0]["encrypted_content"] != items[1][0]["encrypted_content"]
    users = [
        part["text"]
        for item in after[1]
        if item.get("type") == "message" and item.get("role") == "user"
        for part in item["content"]
    ]
    assert PROMPTS[0] in users and PROMPTS[1] in users  # the session's, kept verbatim
    with sqlite3.connect(db) as conn:  # store:false, across the kill too
        left = conn.execute("SELECT count(*) FROM events WHERE stream_id LIKE 'resp_%'")
        assert left.fetchone()[0] == 0
