"""Loading a catalogue entry: a missing optional extra is a 501 that says how to install it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from omni.catalogue import ModelEntry
from omni.errors import NotInstalled
from omni.runtime.loading.loader import Loader


def test_embeddings_without_their_extra_say_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = importlib.util.find_spec

    def lacking(name: str, *args: Any) -> Any:
        return None if name == "mlx_embeddings" else found(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", lacking)
    entry = ModelEntry("all-minilm-l6-v2", "embedding", "", "default")
    with pytest.raises(NotInstalled) as missing:
        Loader(tmp_path)(entry)
    assert missing.value.status == 501 and missing.value.code == "feature_not_installed"
    assert "pip install 'omni-mlx[embeddings]'" in missing.value.message
    assert not (tmp_path / "models").exists()  # nothing fetched for a model it cannot run


def test_features_say_what_runs_here_and_how_to_add_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from omni import features

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mlx_embeddings" else found(name, *a),
    )
    facts = {f["name"]: f for f in features.every()}
    assert facts["embeddings"]["available"] is False
    assert facts["embeddings"]["install"] == "pip install 'omni-mlx[embeddings]'"
    assert facts["postgres"]["available"] is True and facts["postgres"]["install"] is None
    with pytest.raises(NotInstalled, match=r"omni-mlx\[embeddings\]"):
        features.require("embeddings")


def test_a_speech_model_without_the_audio_extra_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from omni import features

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "av" else found(name, *a)
    )
    with pytest.raises(NotInstalled, match=r"needs av, .*pip install 'omni-mlx\[audio\]'"):
        Loader(tmp_path)(ModelEntry("kokoro", "speech", str(tmp_path), "named"))
    facts = {f["name"]: f for f in features.every()}
    assert facts["speech"]["serves"] == "POST /v1/audio/speech"
    assert facts["speech"]["install"] == "pip install 'omni-mlx[audio]'"
    assert facts["images"]["available"] is (found("mflux") is not None)


def test_transcription_without_its_extra_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = importlib.util.find_spec

    def lacking(name: str, *args: Any) -> Any:
        return None if name == "mlx_audio" else found(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", lacking)
    entry = ModelEntry("whisper-tiny.en", "transcription", "", "default")
    with pytest.raises(NotInstalled) as missing:
        Loader(tmp_path)(entry)
    assert missing.value.status == 501 and "pip install 'omni-mlx[audio]'" in missing.value.message
    assert not (tmp_path / "models").exists()  # nothing fetched for a model it cannot run
