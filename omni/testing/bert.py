"""A tiny random-weight BERT as a sentence-transformers folder (config, safetensors, a
WordPiece tokenizer, mean pooling): the real mlx-embeddings code path in milliseconds, for
tests and benchmarks (its vectors mean nothing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni.testing.llama import CORPUS

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_wordpiece(out: Path, vocab_size: int = 400) -> int:
    """tokenizer.json of a BERT-style tokenizer trained on CORPUS; returns its vocab size."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL)
    )
    # The trainer gives the special tokens the first ids, in their order.
    cls, sep = SPECIAL.index("[CLS]"), SPECIAL.index("[SEP]")
    tok.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
    tok.save(str(out / "tokenizer.json"))
    return int(tok.get_vocab_size())


def build_tiny_bert(
    out: Path, *, layers: int = 2, hidden: int = 32, positions: int = 128, seed: int = 0
) -> Path:
    """Write config.json, model.safetensors, tokenizer.json and 1_Pooling/config.json."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_embeddings.models import bert

    out.mkdir(parents=True, exist_ok=True)
    vocab = build_wordpiece(out)
    config: dict[str, Any] = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "intermediate_size": hidden * 2,
        "max_position_embeddings": positions,
        "vocab_size": vocab,
        "type_vocab_size": 2,
        "pad_token_id": 0,
        "layer_norm_eps": 1e-12,
    }
    mx.random.seed(seed)
    model = bert.Model(bert.ModelArgs.from_dict(config))
    flat: list[tuple[str, mx.array]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    mx.save_safetensors(str(out / "model.safetensors"), dict(flat))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "1_Pooling").mkdir(exist_ok=True)
    pooling = {"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True}
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return out
