"""Attention for float32 models on MLX's CPU: the softmax through exp2, not exp.

On a CPU MLX computes attention from its ops, and its softmax's exp is slow: 590,000 of them
(a 64-token chunk against 1,024 keys, 9 heads) took 7.9 ms here where `mx.power(2, x)` took
3.0, so a long prompt's prefill spends most of its time there. Scaling the scores by log2(e)
and taking powers of 2 is the same softmax: SmolLM2-135M prefilled 2,048 tokens in chunks of 128
at 164 tokens/s instead of 128 (512 tokens: 312 instead of 265), the same next token and logit
to 4 decimals, decode unchanged (2 cores, OpenBLAS). Other dtypes, quantized KV caches and
attention sinks go to mlx-lm's function as before.
mlx-lm's model modules call `scaled_dot_product_attention` by the name they imported from
mlx_lm.models.base: `use_exp2_attention` replaces it there, for the engine process alone.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

LOG2E = math.log2(math.e)


def use_exp2_attention(model: Any) -> bool:
    """Route `model`'s attention through `attention` (where its module calls mlx-lm's shared
    function); whether it did."""
    module = sys.modules.get(type(model).__module__)
    original = getattr(module, "scaled_dot_product_attention", None)
    if module is None or original is None:
        return False
    if not getattr(original, "exp2", False):  # not routed already
        module.scaled_dot_product_attention = _with_fallback(original)  # type: ignore[attr-defined]
    return True


def _with_fallback(original: Callable[..., Any]) -> Callable[..., Any]:
    def sdpa(
        queries: Any, keys: Any, values: Any, cache: Any, scale: float, mask: Any, sinks: Any = None
    ) -> Any:
        import mlx.core as mx

        if sinks is not None or hasattr(cache, "bits") or queries.dtype != mx.float32:
            return original(queries, keys, values, cache, scale, mask, sinks)
        return attention(queries, keys, values, scale, mask)

    sdpa.exp2 = True  # type: ignore[attr-defined]
    return sdpa


def attention(queries: Any, keys: Any, values: Any, scale: float, mask: Any) -> Any:
    """What mx.fast.scaled_dot_product_attention computes (grouped query heads, no mask, a
    "causal" one aligned to the last key, or a boolean or additive array), for float32."""
    import mlx.core as mx

    b, heads, length, dim = queries.shape
    kv_heads, keys_n = keys.shape[1], keys.shape[2]
    grouped = (queries * (scale * LOG2E)).reshape(b, kv_heads, heads // kv_heads, length, dim)
    scores = grouped @ keys[:, :, None].swapaxes(-1, -2)
    hidden = mx.array(mx.finfo(mx.float32).min)  # as MLX's: a row with no key left is uniform
    if isinstance(mask, str):  # "causal": query i is at position keys_n - length + i
        seen = mx.arange(keys_n)[None] <= mx.arange(length)[:, None] + (keys_n - length)
        scores = mx.where(seen, scores, hidden)
    elif mask is not None and mask.dtype == mx.bool_:
        scores = mx.where(_per_group(mask, heads, kv_heads), scores, hidden)
    elif mask is not None:
        scores = scores + _per_group(mask, heads, kv_heads) * LOG2E
    weights = mx.power(2.0, scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return (weights @ values[:, :, None]).reshape(b, heads, length, dim)


def _per_group(mask: Any, heads: int, kv_heads: int) -> Any:
    """A mask that broadcasts against (batch, heads, queries, keys), shaped for (batch,
    kv_heads, heads per group, queries, keys)."""
    mask = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))
    if mask.shape[1] == 1:
        return mask[:, :, None]
    return mask.reshape(mask.shape[0], kv_heads, heads // kv_heads, *mask.shape[2:])
