"""The weight formats: float32's size counted through quantization, auto's choice, the unpacking."""

from __future__ import annotations

from typing import Any

from omni.runtime.loading import weights


def tiny(quantized: bool) -> Any:
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models import llama

    mx.random.seed(0)
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        vocab_size=256,
        tie_word_embeddings=False,
    )
    model = llama.Model(args)
    if quantized:
        nn.quantize(model, group_size=32, bits=4)
    return model


def test_float32_bytes_count_the_values_a_quantized_weight_packs() -> None:
    plain, packed = tiny(False), tiny(True)
    assert weights.float32_bytes(plain) == weights.float32_bytes(packed)
    # embeddings and head 256x64, per layer 4 attention (64x64, 32x64 twice), 3 MLP, 2 norms
    layer = 64 * 64 * 2 + 32 * 64 * 2 + 3 * 64 * 128 + 2 * 64
    assert weights.float32_bytes(plain) == 4 * (2 * 256 * 64 + 2 * layer + 64)


def test_auto_takes_float32_only_where_it_is_fast_and_small() -> None:
    model = tiny(True)
    assert weights.choose("auto", model, fast_float32=True) == "float32"
    assert weights.choose("auto", model, fast_float32=False) == "stored"
    assert weights.choose("stored", model, fast_float32=True) == "stored"
    assert weights.choose("float32", model, fast_float32=False) == "float32"


def test_auto_keeps_a_large_model_as_stored(monkeypatch: Any) -> None:
    model = tiny(True)
    monkeypatch.setattr(weights, "FLOAT32_MAX_BYTES", weights.float32_bytes(model) - 1)
    assert weights.choose("auto", model, fast_float32=True) == "stored"


def test_to_float32_unpacks_every_weight() -> None:
    model = tiny(True)
    assert weights.describe(model) == "4-bit quantized"
    model = weights.to_float32(model)
    assert weights.describe(model) == "float32"
    assert weights.describe(tiny(False)) == "float32"
