"""A model folder's generation_config.json, read for the sampling its makers recommend: the
keys other servers take from it (vLLM's `--generation-config auto`), within the ranges a
request may set them to."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omni.ports.chat import RecommendedSampling

# Each key: the type it must have and the values a request may set (as the request's schema).
_RANGES: dict[str, tuple[type, float, float]] = {
    "temperature": (float, 0, 2),
    "top_p": (float, 1e-9, 1),
    "top_k": (int, 0, math.inf),
    "min_p": (float, 0, 1),
    "repetition_penalty": (float, 1e-9, math.inf),
}
# What does nothing once decoding is greedy (transformers ignores them there too).
_SAMPLING_ONLY = ("top_p", "top_k", "min_p")


def recommended_sampling(folder: Path) -> RecommendedSampling:
    """What `folder`'s generation_config.json recommends: nothing where there is none or it
    is unreadable; a value of the wrong type or out of range is left out."""
    try:
        config = json.loads((folder / "generation_config.json").read_text())
    except (OSError, ValueError):
        return RecommendedSampling()
    if not isinstance(config, dict):
        return RecommendedSampling()
    chosen = {key: _value(config.get(key), *_RANGES[key]) for key in _RANGES}
    if chosen["repetition_penalty"] == 1:  # no penalty: and no cost at each step either
        chosen["repetition_penalty"] = None
    if config.get("do_sample") is False:  # greedy, whatever else it says
        chosen |= {"temperature": 0.0, **dict.fromkeys(_SAMPLING_ONLY)}
    return RecommendedSampling(**chosen)


def _value(value: Any, kind: type, low: float, high: float) -> Any:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if not math.isfinite(value) or not low <= value <= high:
        return None
    if kind is int and not float(value).is_integer():
        return None
    return kind(value)


def model_recommends(path: str) -> RecommendedSampling:
    """The recommended sampling of the model at `path`: a folder, or a Hugging Face repo id
    whose files mlx-lm's load put in the cache."""
    folder = Path(path)
    if not folder.is_dir():
        from mlx_lm.utils import hf_repo_to_path

        try:
            repo_path: Callable[[str], Path] = hf_repo_to_path  # unannotated
            folder = repo_path(path)
        except Exception:  # noqa: BLE001 - not all its files are in the cache: no advice
            return RecommendedSampling()
    return recommended_sampling(folder)
