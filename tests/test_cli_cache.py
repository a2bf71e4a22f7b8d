"""`omni cache ls` and `omni cache clear` on a folder the disk tier wrote: every model's entries
(or one model's, by its id), plain or as JSON lines, under OMNI_HOME/kv unless --dir says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache

from omni.cli.program import main
from omni.runtime.chat.kv_disk import DiskTier, Rates


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path) -> Any:
    return load(str(tiny_model_dir))[0]


def write(root: Path, model: Any, key: str, model_id: str, prompts: list[list[int]]) -> None:
    tier = DiskTier(root, key, 1 << 30, model_id=model_id, model_path=f"/models/{model_id}",
                    rates=Rates(gpu=False))  # fmt: skip
    tier.scan()
    for i, tokens in enumerate(prompts):
        cache = make_prompt_cache(model)
        model(mx.array([tokens]), cache=cache)
        assert tier.put(f"ns{i}", tokens, cache)
    tier.close()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["cache", *args]) == 0
    return capsys.readouterr().out


def rows(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run(capsys, "ls", "--json", *args).splitlines()]


def test_ls_and_clear(
    model: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNI_HOME", str(tmp_path / "home"))
    root = tmp_path / "home" / "kv"
    write(root, model, "aaaa", "tiny-a", [list(range(10, 30)), list(range(40, 45))])
    write(root, model, "bbbb", "tiny-b", [list(range(10, 17))])
    listed = rows(capsys)  # OMNI_HOME/kv by default
    assert sorted((r["model"], r["key"], r["tokens"]) for r in listed) == [
        ("tiny-a", "aaaa", 5), ("tiny-a", "aaaa", 20), ("tiny-b", "bbbb", 7)
    ]  # fmt: skip
    assert all(r["tier"] == "disk" and r["bytes"] > 0 and r["hits"] == 0 for r in listed)
    assert [r["key"] for r in rows(capsys, "--model", "tiny-b")] == ["bbbb"]
    assert [r["model"] for r in rows(capsys, "--model", "bbbb")] == ["tiny-b"]  # by its key
    plain = run(capsys, "ls").splitlines()  # piped: aligned columns
    assert plain[0].split() == ["model", "key", "namespace", "tokens", "size", "tier", "last",
                                "use", "hits"]  # fmt: skip
    assert len(plain) == 4 and all("disk" in line for line in plain[1:])

    moved = tmp_path / "elsewhere"
    root.rename(moved)
    assert rows(capsys) == []
    assert len(rows(capsys, "--dir", str(moved))) == 3
    said = run(capsys, "clear", "--dir", str(moved), "--model", "tiny-a")
    assert said.startswith("removed 2 entries of tiny-a")
    assert not (moved / "aaaa").exists() and (moved / "bbbb").exists()
    assert run(capsys, "clear", "--dir", str(moved)).startswith("removed 1 entry ")
    assert rows(capsys, "--dir", str(moved)) == []
