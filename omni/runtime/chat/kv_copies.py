"""The copies of KV caches that the disk tier writes and hands back: cut to a prefix, with
arrays of their own, computed in the caller's thread; and in host memory, for the writer's
thread, which makes no MLX call (kv_format)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map
from mlx_lm.models.cache import KVCache

# mlx-lm leaves its classes unannotated: typed here, where they are called.
_kv_cache: Any = KVCache


def plain(cache: list[Any]) -> bool:
    """Plain KV caches in every layer (no window, no recurrent state): cut by slicing."""
    return all(type(c) is KVCache for c in cache)


def held(cache: list[Any], default: int) -> int:
    """How many tokens `cache` holds (`default` for a cache that does not say)."""
    return int(getattr(cache[0], "offset", default))


def snapshot(cache: list[Any], n: int) -> list[Any] | None:
    """A copy of `cache` cut to its first `n` tokens (None if it cannot be), computed before
    it is returned: another thread may then read it (the writer only reads finished arrays,
    never the caller's graph), and the caller may go on changing its own cache."""
    have = held(cache, n)
    if plain(cache):
        keep = min(have, n)
        if keep <= 0:
            return None
        out = [_kv_cache.from_state((c.keys[..., :keep, :], c.values[..., :keep, :], keep))
               for c in cache]  # fmt: skip
    elif have != n:
        return None
    else:
        # Arrays of its own: a cache updates its arrays in place as it grows.
        def own(x: Any) -> Any:
            return mx.array(x) if isinstance(x, mx.array) else x

        out = [type(c).from_state(tree_map(own, c.state)) for c in cache]
    mx.eval([c.state for c in out])
    return out


def cut(cache: list[Any], keep: int) -> list[Any]:
    """Plain KV caches of the first `keep` of the tokens they hold."""
    out = []
    for c in cache:
        part = _kv_cache()
        part.keys, part.values = c.keys[..., :keep, :], c.values[..., :keep, :]
        part.offset = keep
        out.append(part)
    return out


@dataclass(frozen=True, slots=True)
class Bits:
    """A bfloat16 array's bits (numpy has no bfloat16)."""

    array: np.ndarray[Any, Any]


@dataclass(frozen=True, slots=True)
class HostCache:
    """A KV cache in host memory: each layer's class and state, its arrays numpy's. It holds
    no MLX array: any thread may write it (kv_format)."""

    classes: tuple[Any, ...]  # each layer's cache class
    states: tuple[Any, ...]


def to_host(cache: list[Any]) -> HostCache:
    """Copy an evaluated cache into host memory (in the thread that computed it)."""

    def host(x: Any) -> Any:
        if not isinstance(x, mx.array):
            return x
        if x.dtype == mx.bfloat16:
            return Bits(np.array(x.view(mx.uint16)))
        return np.array(x)

    return HostCache(tuple(type(c) for c in cache), tuple(tree_map(host, c.state) for c in cache))
