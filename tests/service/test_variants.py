"""A chat model's variants as entries of their own: with LoRA adapters (one id per folder,
however it is spelled), decoded with a draft model (in place of a draft it has)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from omni.catalogue import ModelEntry
from omni.errors import InvalidRequest
from omni.service.models import Models
from omni.service.variants import adapted, drafted

BIG = ModelEntry("big", "chat", "/m/big", "models-dir", 8 << 30)
SMALL = ModelEntry("small", "chat", "/m/small", "models-dir", 1 << 30)


def test_adapters_make_an_entry_named_after_their_folder(tmp_path: Path) -> None:
    folder = tmp_path / "Lora-A"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    tuned = adapted(BIG, str(folder))
    assert tuned.id.startswith("big+lora-a-") and len(tuned.id) == len("big+lora-a-") + 8
    assert (tuned.adapter, tuned.base, tuned.origin) == (str(folder), "big", "named")
    assert tuned.path == BIG.path and tuned.size_bytes == BIG.size_bytes
    assert adapted(BIG, str(tmp_path / "." / "Lora-A")).id == tuned.id  # one folder, one id
    with pytest.raises(InvalidRequest) as refused:
        adapted(BIG, str(tmp_path))  # no adapter_config.json
    assert refused.value.param == "adapter_path"


def test_a_draft_model_makes_an_entry_and_replaces_a_draft_it_has() -> None:
    fast = drafted(BIG, SMALL, "small")
    assert (fast.id, fast.draft, fast.draft_path, fast.base) == (
        "big~small", "small", "/m/small", "big"
    )  # fmt: skip
    other = ModelEntry("tiny", "chat", "", "default")
    again = drafted(fast, other, "tiny")
    assert (again.id, again.draft, again.draft_path, again.base) == (
        "big~tiny", "tiny", "tiny", "big"
    )  # fmt: skip
    with pytest.raises(InvalidRequest) as refused:
        drafted(BIG, fast, "big~small")  # a drafted model cannot draft
    assert refused.value.param == "draft_model"


def unloadable(entry: ModelEntry) -> NoReturn:
    raise AssertionError(f"{entry.id} is never loaded here")


def test_the_pool_adds_a_variant_once_and_a_restart_names_it_again(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text("{}")
    models = Models([BIG, SMALL], unloadable, default="big")
    fast = models.with_draft(models.with_adapter(None, str(tmp_path)), "small")
    assert models.with_draft(models.with_adapter("big", str(tmp_path)), "small") == fast
    entry = models.find(fast, "chat")
    assert (entry.base, entry.draft, entry.adapter) == ("big", "small", str(tmp_path))
    recorded = models.variant(entry)
    assert recorded is not None and models.variant_id(recorded) == fast
    assert len(models.entries()) == 4  # big, small, big with adapters, and that drafted
