"""The prefix (KV) cache store on its own, with a tiny real model: which entry a prompt reuses,
that reuse gives the same logits as a full prefill, that an entry is never changed by the
generation that reuses it, and the bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load
from mlx_lm.models.cache import RotatingKVCache, can_trim_prompt_cache, make_prompt_cache

from omni.runtime.chat.prefix_cache import PrefixCache


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path) -> Any:
    return load(str(tiny_model_dir))[0]


def filled(model: Any, tokens: list[int]) -> list[Any]:
    """A KV cache that has seen `tokens`."""
    cache = make_prompt_cache(model)
    model(mx.array([tokens]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def last_logits(model: Any, cache: list[Any], rest: list[int]) -> np.ndarray:
    out = model(mx.array([rest]), cache=cache)[0, -1].astype(mx.float32)
    return np.array(out)


PROMPT = list(range(10, 60))


def test_the_longest_shared_prefix_is_reused(model: Any) -> None:
    store = PrefixCache(model, 8, 1 << 30)
    store.insert("", PROMPT[:20], filled(model, PROMPT[:20]))
    store.insert("", PROMPT[:5] + [900, 901], filled(model, PROMPT[:5] + [900, 901]))
    cache, rest = store.nearest("", PROMPT)
    assert (cache[0].offset, rest) == (20, PROMPT[20:])
    # A longer entry is cut back to what the prompt shares with it.
    cache, rest = store.nearest("", PROMPT[:5] + [900, 7, 8])
    assert (cache[0].offset, rest) == (6, [7, 8])
    # The very same tokens: all but the last come from the cache (it must feed one).
    cache, rest = store.nearest("", PROMPT[:20])
    assert (cache[0].offset, rest) == (19, PROMPT[19:20])
    # Nothing shared: a fresh cache, every token to feed.
    cache, rest = store.nearest("", [5, 6, 7])
    assert (cache[0].offset, rest) == (0, [5, 6, 7])


def test_a_prefix_shorter_than_min_reuse_is_not_reused(model: Any) -> None:
    store = PrefixCache(model, 8, 1 << 30, min_reuse=10)
    store.insert("", PROMPT[:9], filled(model, PROMPT[:9]))
    cache, rest = store.nearest("", PROMPT)  # 9 shared tokens: prefilled whole
    assert (cache[0].offset, rest) == (0, PROMPT)
    store.insert("", PROMPT[:10], filled(model, PROMPT[:10]))
    cache, rest = store.nearest("", PROMPT)  # 10: reused
    assert (cache[0].offset, rest) == (10, PROMPT[10:])


def test_min_reuse_is_one_token_on_a_cpu_and_more_on_a_gpu() -> None:
    from omni.runtime.chat.worker import GPU_MIN_REUSE, min_reuse

    on_gpu = mx.default_device().type == mx.DeviceType.gpu
    assert min_reuse() == (GPU_MIN_REUSE if on_gpu else 1)
    assert GPU_MIN_REUSE > 16  # a chat template's opening is not worth a merge there


def test_namespaces_do_not_share(model: Any) -> None:
    store = PrefixCache(model, 8, 1 << 30)
    store.insert("a", PROMPT[:20], filled(model, PROMPT[:20]))
    assert store.nearest("b", PROMPT)[1] == PROMPT
    assert store.nearest("a", PROMPT)[1] == PROMPT[20:]


def test_reuse_gives_the_logits_of_a_full_prefill(model: Any) -> None:
    store = PrefixCache(model, 8, 1 << 30)
    store.insert("", PROMPT[:40], filled(model, PROMPT[:40]))
    prompt = PROMPT[:30] + [3, 4, 5]  # shares 30 tokens with the entry, which is cut back
    cache, rest = store.nearest("", prompt)
    assert len(rest) == 3
    reused = last_logits(model, cache, rest)
    fresh = last_logits(model, make_prompt_cache(model), prompt)
    np.testing.assert_allclose(reused, fresh, rtol=1e-4, atol=1e-4)


def test_generating_from_a_reused_prefix_leaves_the_entry_as_it_was(model: Any) -> None:
    store = PrefixCache(model, 8, 1 << 30)
    entry = filled(model, PROMPT[:40])
    before = [np.array(c.keys[..., : c.offset, :].astype(mx.float32)) for c in entry]
    store.insert("", PROMPT[:40], entry)
    cache, rest = store.nearest("", PROMPT[:25] + [1, 2])
    for token in [*rest, 3, 4, 5, 6]:  # prefill, then decode steps writing into the cache
        model(mx.array([[token]]), cache=cache)
    mx.eval([c.state for c in cache])
    after = [np.array(c.keys[..., : c.offset, :].astype(mx.float32)) for c in entry]
    assert all(c.offset == 40 for c in entry)
    for old, new in zip(before, after, strict=True):
        np.testing.assert_array_equal(old, new)
    # ... and a second reuse of it still matches a full prefill.
    again, rest = store.nearest("", PROMPT[:40] + [9])
    fresh = last_logits(model, make_prompt_cache(model), PROMPT[:40] + [9])
    np.testing.assert_allclose(last_logits(model, again, rest), fresh, rtol=1e-4, atol=1e-4)


def test_bounds_by_entries_and_bytes_oldest_out_first(model: Any) -> None:
    caches = {i: filled(model, [i, *PROMPT[:10]]) for i in range(4)}
    size = sum(c.nbytes for c in caches[0])
    store = PrefixCache(model, 2, 1 << 30)
    for i in range(3):
        store.insert("", [i, *PROMPT[:10]], caches[i])
    assert store.nearest("", [0, *PROMPT[:11]])[0][0].offset == 0  # the oldest left
    assert store.nearest("", [1, *PROMPT[:11]])[0][0].offset == 11
    # Used just now, entry 1 outlives entry 2 when the next one comes in.
    store.insert("", [3, *PROMPT[:10]], caches[3])
    assert store.nearest("", [2, *PROMPT[:11]])[0][0].offset == 0
    assert store.nearest("", [1, *PROMPT[:11]])[0][0].offset == 11

    by_bytes = PrefixCache(model, 10, size + size // 2)  # room for one
    by_bytes.insert("", [0, *PROMPT[:10]], caches[0])
    by_bytes.insert("", [1, *PROMPT[:10]], caches[1])
    assert len(by_bytes) == 1
    assert by_bytes.nearest("", [0, *PROMPT[:11]])[0][0].offset == 0
    assert by_bytes.nearest("", [1, *PROMPT[:11]])[0][0].offset == 11

    off = PrefixCache(model, 0, 0)  # no bytes: nothing kept (no bound on entries: any)
    off.insert("", PROMPT[:10], caches[0])
    assert off.nearest("", PROMPT)[1] == PROMPT
    unbounded = PrefixCache(model, 0, 1 << 30)
    for i in range(4):
        unbounded.insert("", [i, *PROMPT[:10]], caches[i])
    assert len(unbounded) == 4


def test_a_session_s_cache_outlives_a_reused_one_which_outlives_a_one_off(model: Any) -> None:
    """Room for two: a one-off prompt's cache leaves before one used again since it was
    kept, and that one before a multi-turn session's, however recently each was used (a
    one-off with no older one-off to leave in its stead is not kept); a session's next turn,
    which extends its entry, keeps that standing."""
    caches = {i: filled(model, [i, *PROMPT[:10]]) for i in range(4)}
    size = sum(c.nbytes for c in caches[0])
    store = PrefixCache(model, 0, 2 * size + size // 2)
    store.insert("", [0, *PROMPT[:10]], caches[0], session=True)
    store.insert("", [1, *PROMPT[:10]], caches[1])
    store.insert("", [2, *PROMPT[:10]], caches[2])  # one-off: 1, the older, leaves
    assert store.nearest("", [1, *PROMPT[:11]])[0][0].offset == 0
    assert store.nearest("", [2, *PROMPT[:11]])[0][0].offset == 11  # now reused
    store.insert("", [3, *PROMPT[:10]], caches[3])  # the only one-off: not kept
    assert store.nearest("", [3, *PROMPT[:11]])[0][0].offset == 0
    assert store.nearest("", [2, *PROMPT[:11]])[0][0].offset == 11
    assert store.nearest("", [0, *PROMPT[:11]])[0][0].offset == 11  # the session's stays
    longer = [0, *PROMPT[:14]]
    store.insert("", longer, filled(model, longer))  # its next turn: still a session's
    store.insert("", [1, *PROMPT[:10]], caches[1])  # a one-off: leaves, not the session
    assert store.nearest("", [*longer, 5])[0][0].offset == len(longer)


def test_an_entry_that_a_longer_one_extends_is_dropped(model: Any) -> None:
    store = PrefixCache(model, 4, 1 << 30)
    store.insert("", PROMPT[:10], filled(model, PROMPT[:10]))
    store.insert("", [7, 7, 7], filled(model, [7, 7, 7]))
    store.insert("", PROMPT[:20], filled(model, PROMPT[:20]))  # extends the first
    assert len(store) == 2
    assert store.nearest("", PROMPT[:10] + [99])[0][0].offset == 10  # from the longer one
    assert store.nearest("", [7, 7, 7, 8])[0][0].offset == 3
    store.insert("", PROMPT[:5], filled(model, PROMPT[:5]))  # a prefix of a kept one: kept
    assert len(store) == 3


def test_only_entries_that_are_prefixes_are_dropped(model: Any) -> None:
    store = PrefixCache(model, 8, 1 << 30)
    # Against [11, 14, 13, 16] below: its third token is 13, as the first entry's last.
    store.insert("", [11, 12, 13], filled(model, [11, 12, 13]))  # same last token: kept
    store.insert("", [11, 12, 15], filled(model, [11, 12, 15]))  # another last token: kept
    store.insert("", [11, 12], filled(model, [11, 12]))  # shorter than the two above: kept
    store.insert("", [11, 14, 13, 16], filled(model, [11, 14, 13, 16]))
    assert len(store) == 4  # none of the first three is a prefix of it
    store.insert("", [11, 14, 13, 16, 17], filled(model, [11, 14, 13, 16, 17]))
    assert len(store) == 4
    assert store.nearest("", [11, 12, 13, 99])[0][0].offset == 3
    assert store.nearest("", [11, 12, 15, 99])[0][0].offset == 3
    assert store.nearest("", [11, 14, 13, 16, 17, 99])[0][0].offset == 5


def windowed(model: Any, tokens: list[int], window: int = 4) -> list[Any]:
    """A sliding-window cache past its window: it cannot be cut back any more."""
    cache = [RotatingKVCache(max_size=window) for _ in model.layers]
    for token in tokens:  # one at a time, as decoding fills it
        model(mx.array([[token]]), cache=cache)
    mx.eval([c.state for c in cache])
    assert not can_trim_prompt_cache(cache)
    return cache


def test_an_entry_that_cannot_be_cut_is_used_whole_or_not_at_all(model: Any) -> None:
    store = PrefixCache(model, 8, 1 << 30)
    store.insert("", PROMPT[:5], windowed(model, PROMPT[:5]))
    store.insert("", [*PROMPT[:7], 99], windowed(model, [*PROMPT[:7], 99]))
    # The longer entry shares 7 tokens but would have to be cut: the one held whole is used.
    cache, rest = store.nearest("", PROMPT[:8])
    assert (cache[0].offset, rest) == (5, PROMPT[5:8])
    # The very same tokens: it would have to give back the last one; nothing is reused.
    assert store.nearest("", PROMPT[:5])[1] == PROMPT[:5]


def test_a_cache_holding_more_than_its_tokens_is_cut_back_or_not_kept(model: Any) -> None:
    store = PrefixCache(model, 8, 1 << 30)
    store.insert("", PROMPT[:20], filled(model, PROMPT[:21]))  # one more token than named
    cache, rest = store.nearest("", PROMPT)
    assert (cache[0].offset, rest) == (20, PROMPT[20:])
    np.testing.assert_allclose(
        last_logits(model, cache, rest),
        last_logits(model, make_prompt_cache(model), PROMPT),
        rtol=1e-4,
        atol=1e-4,
    )
    store.insert("", PROMPT[:5], windowed(model, PROMPT[:6]))
    assert len(store) == 1
