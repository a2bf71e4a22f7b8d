"""Loading a catalogue entry: a missing optional extra is a 501 that says how to install it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from omni.catalogue import ModelEntry
from omni.errors import NotInstalled
from omni.runtime.loading import Loader


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
