"""A chat model's variants: with LoRA adapters loaded on it, or decoded speculatively with a
draft model. Each is an entry of its own in the pool (its engine, its prefix cache), made here
from the entries it derives from; the pool adds it to the catalogue (omni.service.models)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from omni.catalogue import ModelEntry
from omni.errors import InvalidRequest


def adapted(base: ModelEntry, adapter: str) -> ModelEntry:
    """`base` (a model without adapters) with the LoRA adapters in folder `adapter` loaded on
    it, under an id that names the folder (resolved: one id whatever the spelling)."""
    folder = Path(adapter).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise InvalidRequest(
            f"adapter_path '{adapter}' is not an mlx-lm adapter folder (no "
            "adapter_config.json there).",
            param="adapter_path",
        )
    folder = folder.resolve()
    digest = hashlib.sha256(str(folder).encode()).hexdigest()[:8]
    return dataclasses.replace(
        base, id=f"{base.id}+{folder.name.lower()}-{digest}", adapter=str(folder),
        base=base.base or base.id, origin="named",
    )  # fmt: skip


def drafted(model: ModelEntry, helper: ModelEntry, draft: str) -> ModelEntry:
    """`model` decoded speculatively with `helper` (which the request named `draft`) drafting
    its tokens, in place of a draft it has."""
    if helper.draft or helper.adapter:
        raise InvalidRequest(f"'{draft}' cannot draft: name a plain model.", param="draft_model")
    if model.draft:
        model = dataclasses.replace(model, id=model.id.rsplit("~", 1)[0], draft="")
    return dataclasses.replace(
        model, id=f"{model.id}~{helper.id}", draft=helper.id, draft_path=helper.path or helper.id,
        base=model.base or model.id, origin="named",
    )  # fmt: skip
