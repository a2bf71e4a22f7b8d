"""`omni models` (the catalogue, plain when piped, JSON lines with --json, what a server has
loaded when one answers), the catalogue flags' errors (one line each) and `--model` naming a
model of the catalogue, or nothing found (one line saying what was looked for, and where)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from omni.testing.llama import build_tiny_llama
from tests.server import free_port
from tests.test_cli import assert_one_line_error, omni, serving


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shelf")
    build_tiny_llama(root / "tiny-a")
    build_tiny_llama(root / "tiny-b", seed=3)
    return root


def test_omni_models_lists_the_catalogue_and_what_is_loaded(
    shelf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNI_HOME", str(tmp_path / "home"))
    flags = ("--models-dir", str(shelf), "--no-hf-cache")
    with serving(shelf / "tiny-a", tmp_path / "omni.db", "warning", None, *flags) as (base, _):
        listed = omni("models", *flags, "--url", base, "--json")
        plain = omni("models", *flags, "--url", base)
        # Told nothing of the server's --models-dir, it lists what the server serves all the same.
        asked = omni("models", "--no-hf-cache", "--url", base, "--json")
    served = {r["id"]: r for r in map(json.loads, asked.stdout.splitlines())}
    assert served["tiny-b"]["origin"] == "models-dir" and served["tiny-b"]["loaded"] is False
    assert served["tiny-a"]["loaded"] is True
    rows = {r["id"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert listed.returncode == 0, listed.stderr
    assert rows["tiny-a"]["loaded"] is True and rows["tiny-b"]["loaded"] is False
    assert rows["tiny-b"]["size_bytes"] > 0 and rows["tiny-b"]["origin"] == "models-dir"
    assert rows["all-minilm-l6-v2"]["kind"] == "embedding"
    lines = plain.stdout.splitlines()
    assert lines[0].split() == ["id", "kind", "origin", "loaded", "size", "path"]
    assert any(line.split()[:4] == ["tiny-a", "chat", "models-dir", "yes"] for line in lines)
    alone = omni("models", *flags, "--url", "http://127.0.0.1:9", "--json")  # nobody there
    assert {json.loads(r)["loaded"] for r in alone.stdout.splitlines()} == {None}
    assert "not known" in omni("models", *flags, "--url", "http://127.0.0.1:9").stderr


def test_catalogue_flags_fail_in_one_line(shelf: Path, tmp_path: Path) -> None:
    bad_toml = tmp_path / "omni.toml"
    bad_toml.write_text("[aliases\n")
    serve = ("serve", "--model", str(shelf / "tiny-a"), "--db", str(tmp_path / "omni.db"))
    assert_one_line_error(omni(*serve, "--config", str(bad_toml)), "not TOML")
    assert_one_line_error(omni(*serve, "--config", str(tmp_path / "none.toml")), "--config")
    unknown = tmp_path / "aliases.toml"
    unknown.write_text('[aliases]\n"gpt-5.5" = "no-such-model"\n')
    assert_one_line_error(omni(*serve, "--config", str(unknown)), "no model 'no-such-model'")
    assert_one_line_error(omni("models", "pull", "nothing-like-it"), "cannot pull")
    usage = omni(*serve, "--alias", "no-equals-sign")
    assert usage.returncode == 2 and "NAME=MODEL" in usage.stderr


def test_serve_refuses_a_model_it_cannot_find_in_one_line(
    shelf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, hf = tmp_path / "home", tmp_path / "hf"
    monkeypatch.setenv("OMNI_HOME", str(home))
    monkeypatch.setenv("HF_HOME", str(hf))
    db = tmp_path / "omni.db"
    serve = ("serve", "--db", str(db), "--port", str(free_port()), "--models-dir", str(shelf))
    result = omni(*serve, "--model", "nosuchmodel", "--alias", "fav=tiny-b")
    assert_one_line_error(result, "--model nosuchmodel: model not found")
    line = result.stderr.strip().splitlines()[-1]
    looked = ("smollm2-135m-instruct", "tiny-a", "tiny-b", "fav", f"OMNI_HOME/models ({home}",
              f"--models-dir {shelf}", f"Hugging Face cache ({hf / 'hub'})", "at that path",
              "repo id")  # fmt: skip
    assert all(what in line for what in looked), line
    assert "loading" not in result.stderr and not db.exists()  # stopped before anything began
    # An embedding model is no default chat model: said so, in one line.
    embedder = omni(*serve, "--model", "all-minilm-l6-v2")
    assert_one_line_error(embedder, "is a model of kind embedding")
    # A repo id neither in the cache nor fetched (offline here): one line too, no traceback.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = omni(*serve, "--model", "nobody/nothing-here")
    assert_one_line_error(offline, "cannot fetch nobody/nothing-here from the Hugging Face hub")
    assert not db.exists()


def test_serve_model_names_a_models_dir_model_by_its_id(
    shelf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNI_HOME", str(tmp_path / "home"))  # no default model fetched there
    flags = ("--models-dir", str(shelf), "--no-hf-cache")
    with serving(Path("tiny-b"), tmp_path / "omni.db", "warning", None, *flags) as (base, _):
        listed = {m["id"]: m for m in httpx.get(f"{base}/v1/models").json()["data"]}
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        answer = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60).json()
    assert answer["model"] == "tiny-b"  # the default a request that names none gets
    assert listed["tiny-b"]["loaded"] and listed["tiny-b"]["aliases"] == []
    assert not listed["smollm2-135m-instruct"]["loaded"]
    assert listed["smollm2-135m-instruct"]["aliases"] == []
