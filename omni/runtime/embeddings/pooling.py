"""How an embedding model makes one vector of its tokens' hidden states: as its
sentence-transformers folder says (1_Pooling/config.json), so that Omni's vectors are the ones
the model was trained to give. Pure reads of the folder; the arithmetic is in its worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# sentence-transformers' pooling modes, in the order it concatenates them.
MODES = ("cls", "max", "mean", "mean_sqrt_len", "lasttoken")
_FLAGS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}
# Modules after pooling that change nothing but the norm, which Omni applies anyway.
_PLAIN = {"Transformer", "Pooling", "Normalize"}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def pooling_modes(folder: Path) -> tuple[str, ...] | None:
    """The modes the folder's pooling config names (several are concatenated), or None
    where it has none, names one Omni does not do (weighted mean), or follows the pooling
    with modules of its own (a Dense layer): then the model's own pooled output is used
    (mlx-embeddings pools each family as it knows)."""
    modules = _json(folder / "modules.json")
    if isinstance(modules, list):
        kinds = {str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)}
        if kinds - _PLAIN:
            return None
    config = _json(folder / "1_Pooling" / "config.json")
    if not isinstance(config, dict) or config.get("pooling_mode_weightedmean_tokens"):
        return None
    modes = tuple(m for m in MODES if config.get(_FLAGS[m]))
    return modes or None


def context_length(folder: Path) -> int:
    """The most tokens of one input: sentence-transformers' max_seq_length where the folder
    has one (what the model was trained on; all-MiniLM-L6-v2: 256 of its 512 positions),
    else its position embeddings' (RoBERTa's start past the padding id)."""
    st = _json(folder / "sentence_bert_config.json")
    if isinstance(st, dict) and isinstance(st.get("max_seq_length"), int):
        return int(st["max_seq_length"])
    config = _json(folder / "config.json") or {}
    positions = int(config.get("max_position_embeddings") or 512)
    if str(config.get("model_type", "")).replace("_", "-") in ("roberta", "xlm-roberta"):
        positions -= int(config.get("pad_token_id") or 1) + 1
    return positions
