"""The exp2 attention computes what MLX's own does, for every kind of mask mlx-lm passes."""

from __future__ import annotations

import sys
from typing import Any

import mlx.core as mx
import pytest

from omni.runtime.platform.cpu_attention import attention, use_exp2_attention

B, H, KV_HEADS, L, S, D = 2, 6, 2, 5, 9, 16


def masks() -> dict[str, Any]:
    mx.random.seed(1)
    none_left = mx.ones((B, 1, L, S), dtype=mx.bool_)
    return {
        "none": None,
        "causal": "causal",
        "boolean": mx.random.uniform(shape=(B, 1, L, S)) > 0.3,
        "boolean per head": mx.random.uniform(shape=(B, H, L, S)) > 0.3,
        "boolean 2-d": mx.random.uniform(shape=(L, S)) > 0.2,
        "additive": mx.random.normal((L, S)),
        # a left-padded row of a batch: no key to see
        "a row with no key": mx.concatenate([none_left[:, :, :1] * False, none_left[:, :, 1:]], 2),
    }


@pytest.mark.parametrize("name", list(masks()))
def test_the_same_attention_as_mlx(name: str) -> None:
    mask = masks()[name]
    q = mx.random.normal((B, H, L, D))
    k, v = mx.random.normal((B, KV_HEADS, S, D)), mx.random.normal((B, KV_HEADS, S, D))
    ours = attention(q, k, v, 0.25, mask)
    theirs = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=mask)
    assert mx.allclose(ours, theirs, atol=1e-5).item()


def test_a_model_routed_through_it_answers_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlx_lm.models import llama
    from mlx_lm.models.cache import make_prompt_cache

    mx.random.seed(0)
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        vocab_size=128,
    )
    model = llama.Model(args)
    tokens = mx.array([[1, 5, 9, 3, 7, 2, 8]])

    def logits() -> mx.array:
        cache = make_prompt_cache(model)
        model(tokens[:, :4], cache=cache)  # a chunk, then the rest against it
        return model(tokens[:, 4:], cache=cache)

    before = logits()
    module = sys.modules[llama.Model.__module__]
    monkeypatch.setattr(module, "scaled_dot_product_attention", module.scaled_dot_product_attention)
    assert use_exp2_attention(model) and use_exp2_attention(model)  # twice: routed once
    assert module.scaled_dot_product_attention.exp2
    assert mx.allclose(logits(), before, atol=1e-4).item()
