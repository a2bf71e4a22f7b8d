"""The disk tier's file, written from host memory without MLX, is the file mlx-lm's
save_prompt_cache writes: mlx-lm's load_prompt_cache reads back the same arrays, classes, scalars
and metadata, for plain, rotating and quantized caches, in float32 and bfloat16."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.cache import (
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    load_prompt_cache,
    save_prompt_cache,
)

from omni.runtime.chat.kv_copies import to_host
from omni.runtime.chat.kv_format import write_cache


def filled(cache: Any, dtype: Any, tokens: int = 20) -> Any:
    keys = mx.random.normal((1, 2, tokens, 32)).astype(dtype)
    values = mx.random.normal((1, 2, tokens, 32)).astype(dtype)
    cache.update_and_fetch(keys, values)
    return cache


def kinds(dtype: Any) -> list[Any]:
    return [filled(KVCache(), dtype), filled(RotatingKVCache(max_size=12, keep=4), dtype),
            filled(QuantizedKVCache(group_size=32, bits=4), dtype)]  # fmt: skip


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_load_prompt_cache_reads_it_as_mlx_lms_own(tmp_path: Path, dtype: Any) -> None:
    cache = kinds(dtype)
    mx.eval([c.state for c in cache])
    meta = {"model_key": "k", "tokens": "[1, 2]"}
    save_prompt_cache(str(tmp_path / "theirs.safetensors"), cache, meta)
    host = to_host(cache)
    ours = tmp_path / "ours.safetensors"
    # Written by another thread, as the tier's writer does.
    writer = threading.Thread(target=_write, args=(ours, host, meta))
    writer.start()
    writer.join()
    theirs, their_meta = load_prompt_cache(str(tmp_path / "theirs.safetensors"), True)
    back, our_meta = load_prompt_cache(str(ours), True)
    assert our_meta == their_meta == meta
    assert [type(c) for c in back] == [type(c) for c in theirs] == [type(c) for c in cache]
    for a, b in zip(back, theirs, strict=True):
        ours_flat, theirs_flat = tree_flatten(a.state), tree_flatten(b.state)
        assert [k for k, _ in ours_flat] == [k for k, _ in theirs_flat]
        for (_, x), (_, y) in zip(ours_flat, theirs_flat, strict=True):
            if isinstance(y, mx.array):  # else a scalar: an offset, a size
                assert x.dtype == y.dtype and mx.array_equal(x, y).item()
            else:
                assert (type(x), x) == (type(y), y)


def _write(path: Path, host: Any, meta: dict[str, str]) -> None:
    with open(path, "wb") as f:
        write_cache(f, host, meta)


def test_a_state_of_another_kind_is_refused(tmp_path: Path) -> None:
    host = to_host([filled(KVCache(), mx.float32)])
    odd = type(host)(host.classes, ((host.states[0][0], object()),))
    with pytest.raises(ValueError, match="cannot be written"), open(tmp_path / "x", "wb") as f:
        write_cache(f, odd, {})
