"""Pooling as a sentence-transformers folder says, and the arithmetic of each mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni.runtime.embeddings.pooling import context_length, pooling_modes


def folder(
    tmp_path: Path,
    pooling: dict[str, object] | None,
    modules: list[str] | None = None,
    **files: object,
) -> Path:
    if pooling is not None:
        (tmp_path / "1_Pooling").mkdir()
        (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if modules is not None:
        kinds = [{"type": f"sentence_transformers.models.{m}"} for m in modules]
        (tmp_path / "modules.json").write_text(json.dumps(kinds))
    for name, value in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(value))
    return tmp_path


def test_modes_from_the_pooling_config(tmp_path: Path) -> None:
    flags = {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}
    assert pooling_modes(folder(tmp_path, flags, ["Transformer", "Pooling", "Normalize"])) == (
        "cls",
        "mean",
    )


@pytest.mark.parametrize(
    ("pooling", "modules"),
    [
        (None, None),  # no config: the model's own pooled output
        ({"pooling_mode_weightedmean_tokens": True}, None),
        ({"pooling_mode_mean_tokens": True}, ["Transformer", "Pooling", "Dense", "Normalize"]),
        ({}, None),
    ],
)
def test_what_omni_does_not_pool_itself(tmp_path: Path, pooling, modules) -> None:
    assert pooling_modes(folder(tmp_path, pooling, modules)) is None


def test_context_length(tmp_path: Path) -> None:
    assert (
        context_length(
            folder(
                _mk(tmp_path / "a"),
                None,
                sentence_bert_config={"max_seq_length": 256},
                config={"max_position_embeddings": 512},
            )
        )
        == 256
    )
    assert (
        context_length(
            folder(
                _mk(tmp_path / "b"),
                None,
                config={"max_position_embeddings": 512, "model_type": "bert"},
            )
        )
        == 512
    )
    assert (
        context_length(
            folder(
                _mk(tmp_path / "c"),
                None,
                config={
                    "max_position_embeddings": 514,
                    "model_type": "xlm-roberta",
                    "pad_token_id": 1,
                },
            )
        )
        == 512
    )


def test_pool_arithmetic() -> None:
    import mlx.core as mx

    from omni.runtime.embeddings.worker import pool

    hidden = mx.array([[[1.0, 0.0], [3.0, 4.0], [100.0, 100.0]]])  # the third is padding
    mask = mx.array([[1.0, 1.0, 0.0]])
    assert pool(hidden, mask, ("cls",)).tolist() == [[1.0, 0.0]]
    assert pool(hidden, mask, ("mean",)).tolist() == [[2.0, 2.0]]
    assert pool(hidden, mask, ("max",)).tolist() == [[3.0, 4.0]]
    assert pool(hidden, mask, ("lasttoken",)).tolist() == [[3.0, 4.0]]
    assert pool(hidden, mask, ("cls", "mean")).tolist() == [[1.0, 0.0, 2.0, 2.0]]


def _mk(path: Path) -> Path:
    path.mkdir()
    return path
