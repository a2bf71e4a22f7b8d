"""The format the engine keeps the model's weights in: as stored, or float32."""

from __future__ import annotations

import os
from typing import Any

AUTO = "auto"
STORED = "stored"
FLOAT32 = "float32"
CHOICES = (AUTO, STORED, FLOAT32)

# `auto` takes float32 on a CPU with an optimized BLAS for models up to this size in float32
# (and a quarter of the machine's memory). There MLX's float32 matrix products are the BLAS's,
# while its quantized and half-precision ones are its own loops. SmolLM2-135M (0.54 GB in
# float32), 256-token prefill and decode in tokens/s, 2 cores: float32 306 / 12.9 with OpenBLAS
# 0.3.21 (15.7 / 5.1 with MLX's bundled BLAS), 4-bit as stored 15.0 / 8.2, bfloat16 28.4 / 6.3,
# float16 17.4 / 3.1. Decode reads every weight once a token, at ~10 GB/s here: a random llama of
# SmolLM2-360M's shape (1.45 GB) decoded 6.7 tokens/s in float32, prefilled 159. 4-bit decode
# is bound by its kernels (~0.9 ns a weight here against float32's ~0.6), not by memory, so it
# should stay behind as models grow (measured on SmolLM2-135M only). The bound is memory's:
# float32 takes 8x a 4-bit model's, and past ~2 GB it would crowd out the prefix cache (4 GB by
# default) on the machines that run such a model on a CPU.
FLOAT32_MAX_BYTES = 2 << 30


def float32_bytes(model: Any) -> int:
    """The bytes of the model's parameters in float32 (a quantized weight counted as the
    values it packs; its scales and biases are not weights)."""
    from mlx.utils import tree_flatten

    packed = {name: m.bits for name, m in model.named_modules() if _quantized(m)}
    params: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    total = 0
    for name, array in params:
        owner, _, leaf = name.rpartition(".")
        if owner not in packed:
            total += array.size
        elif leaf == "weight":
            total += array.size * 32 // packed[owner]
        elif leaf == "bias":
            total += array.size
    return total * 4


def choose(setting: str, model: Any, fast_float32: bool) -> str:
    """`setting`, or for auto the format to run in (`fast_float32`: on a CPU whose float32
    matrix products are an optimized BLAS's)."""
    if setting != AUTO:
        return setting
    bound = min(FLOAT32_MAX_BYTES, _memory() // 4)
    return FLOAT32 if fast_float32 and float32_bytes(model) <= bound else STORED


def to_float32(model: Any) -> Any:
    """The model with every weight float32 (quantized ones unpacked), evaluated."""
    import mlx.core as mx
    from mlx_lm.utils import dequantize_model

    model = dequantize_model(model)
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    return model


def nbytes(model: Any) -> int:
    """The bytes the model's parameters take in memory now (what the pool budgets)."""
    from mlx.utils import tree_flatten

    params: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    return sum(array.nbytes for _, array in params)


def describe(model: Any) -> str:
    """What the weights are now: "4-bit quantized", "float32", ..."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    bits = sorted({m.bits for _, m in model.named_modules() if _quantized(m)})
    if bits:
        return "/".join(str(b) for b in bits) + "-bit quantized"
    params: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    kinds = {str(a.dtype) for _, a in params if mx.issubdtype(a.dtype, mx.floating)}
    return "/".join(sorted(k.removeprefix("mlx.core.") for k in kinds)) or "none"


def _quantized(module: Any) -> bool:
    return hasattr(module, "bits") and "scales" in module


def _memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not known here: no bound from it
        return 1 << 62
