"""resolve_model: default, folders, GGUF files (converted once), HF repo ids, and misses."""

from __future__ import annotations

import os
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from omni.errors import ModelLoadError
from omni.runtime.loading import default_model, gguf
from omni.runtime.loading.source import ModelSource, gguf_cache_dir, resolve_model


@pytest.fixture
def conversions(monkeypatch) -> list[tuple[Path, Path]]:
    """Replace the real converter with one that records its calls and writes a stub."""
    calls: list[tuple[Path, Path]] = []

    def fake_convert(src: Path, out: Path, progress=None) -> Path:
        calls.append((src, out))
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        return out

    monkeypatch.setattr(gguf, "convert_gguf", fake_convert)
    return calls


def test_default_model(tmp_path, monkeypatch):
    homes = []

    def fake_ensure(home: Path, progress=None) -> Path:
        homes.append(home)
        return home / "models" / default_model.DEFAULT_MODEL_ID

    monkeypatch.setattr(default_model, "ensure_default_model", fake_ensure)
    expected = ModelSource(
        str(tmp_path / "models" / "smollm2-135m-instruct"), "smollm2-135m-instruct"
    )
    assert resolve_model(None, tmp_path) == expected
    assert resolve_model("smollm2-135m-instruct", tmp_path) == expected
    assert homes == [tmp_path, tmp_path]


def test_local_folder(tmp_path):
    folder = tmp_path / "My-Model"
    folder.mkdir()
    assert resolve_model(str(folder), tmp_path / "home") == ModelSource(str(folder), "my-model")


def test_gguf_is_converted_once_and_reconverted_when_changed(tmp_path, conversions):
    src = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    src.write_bytes(b"x" * 100)
    home = tmp_path / "home"
    first = resolve_model(str(src), home)
    assert first.model_id == "smollm2-135m-instruct.q4_1"
    assert Path(first.path).parent == home / "models"
    assert Path(first.path).name.startswith("smollm2-135m-instruct.q4_1-")
    assert resolve_model(str(src), home) == first
    assert len(conversions) == 1

    os.utime(src, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 10**9))
    second = resolve_model(str(src), home)
    assert second.model_id == first.model_id and second.path != first.path
    assert len(conversions) == 2 and Path(second.path) == gguf_cache_dir(src, home)


def test_hf_repo_id_is_passed_through(tmp_path):
    repo = "mlx-community/SmolLM2-135M-Instruct-4bit"
    assert resolve_model(repo, tmp_path) == ModelSource(repo, repo)


@pytest.mark.parametrize(
    "spec", ["./missing", "/nowhere/model", "missing.gguf", "a/b/c", "~/nope", "owner/x.gguf", "x"]
)
def test_missing_paths_are_refused(tmp_path, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError, match="model not found: "):
        resolve_model(spec, tmp_path / "home")


def test_other_files_are_refused(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="not a model folder or .gguf file"):
        resolve_model(str(tmp_path / "weights.bin"), tmp_path / "home")


def test_model_source_is_frozen():
    with pytest.raises(FrozenInstanceError):
        ModelSource("a", "b").path = "c"  # type: ignore[misc]
