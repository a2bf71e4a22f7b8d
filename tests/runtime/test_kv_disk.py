"""The disk tier of the prefix cache with a tiny real model: a cache comes back as it was written
(same arrays, same next-token logits), what cannot be trusted is removed with one log line and
never loaded, eviction by value, longest-prefix lookup, the model key, the background writer and
two tiers sharing a folder."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load
from mlx_lm.models.cache import RotatingKVCache, make_prompt_cache, trim_prompt_cache

from omni.runtime.chat import kv_disk
from omni.runtime.chat.kv_disk import DiskTier, Rates, model_key
from omni.runtime.chat.kv_files import DATA, SIDECAR, Sidecar, entry_name, write_atomic

PROMPT = list(range(10, 60))
KEY = "k1"


@pytest.fixture(scope="module")
def loaded(tiny_model_dir: Path) -> tuple[Any, Any]:
    model, tokenizer = load(str(tiny_model_dir))[:2]
    return model, tokenizer


@pytest.fixture(scope="module")
def model(loaded: tuple[Any, Any]) -> Any:
    return loaded[0]


def filled(model: Any, tokens: list[int], window: int | None = None) -> list[Any]:
    if window is None:
        cache = make_prompt_cache(model)
    else:  # a sliding window: cut back only while it has not slid (not by the disk tier)
        cache = [RotatingKVCache(max_size=window, keep=4) for _ in model.layers]
    model(mx.array([tokens]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def next_logits(model: Any, cache: list[Any], token: int) -> np.ndarray:
    return np.array(model(mx.array([[token]]), cache=cache)[0, -1].astype(mx.float32))


def tier(folder: Path, key: str = KEY, max_bytes: int = 1 << 30) -> DiskTier:
    t = DiskTier(folder, key, max_bytes, model_id="tiny", model_path="/models/tiny",
                 rates=Rates(gpu=False))  # fmt: skip
    t.scan()
    return t


def written(t: DiskTier, model: Any, namespace: str, tokens: list[int], **kw: Any) -> None:
    assert t.put(namespace, tokens, filled(model, tokens), **kw)
    t.flush()


def removals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == kv_disk.__name__]


def test_a_cache_comes_back_as_it_was_written(model: Any, tmp_path: Path) -> None:
    t = tier(tmp_path)
    original = filled(model, PROMPT)
    assert t.put("", PROMPT, original)
    t.flush()
    found = t.nearest("", PROMPT + [7])
    assert found is not None and found[1] == len(PROMPT)
    back = t.load(*found)
    assert back is not None
    for a, b in zip(original, back, strict=True):
        assert b.offset == a.offset == len(PROMPT)
        assert np.array_equal(np.array(a.keys[..., : a.offset, :]), np.array(b.keys))
        assert np.array_equal(np.array(a.values[..., : a.offset, :]), np.array(b.values))
    assert np.array_equal(next_logits(model, original, 7), next_logits(model, back, 7))
    # Cut back to a prefix: as if only that prefix had been computed.
    part = t.load(found[0], 20)
    assert part is not None and part[0].offset == 20
    expected = next_logits(model, filled(model, PROMPT[:20]), PROMPT[20])
    np.testing.assert_allclose(next_logits(model, part, PROMPT[20]), expected, atol=1e-5)
    stats = t.stats()
    assert (stats["entries"], stats["loads"], stats["tokens_loaded"]) == (1, 2, 70)
    assert stats["bytes"] == stats["bytes_written"] > 0 and stats["load_seconds"] > 0
    assert t.rates.read_rate is not None  # each load measures the disk


def _truncate(folder: Path, name: str) -> None:
    data = folder / f"{name}{DATA}"
    data.write_bytes(data.read_bytes()[:-100])


def _flip(folder: Path, name: str) -> None:
    data = folder / f"{name}{DATA}"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))


def _other_tokens(folder: Path, name: str) -> None:
    """A sidecar that names other tokens than its data file holds (renamed to match them)."""
    side = Sidecar.loads((folder / f"{name}{SIDECAR}").read_bytes())
    tokens = (*side.tokens[:-1], 999)
    other = Sidecar(side.model_key, side.namespace, tokens, side.nbytes, side.sha256,
                    side.created, side.classes)  # fmt: skip
    new = entry_name(side.namespace, tokens)
    (folder / f"{name}{DATA}").rename(folder / f"{new}{DATA}")
    (folder / f"{name}{SIDECAR}").unlink()
    write_atomic(folder / f"{new}{SIDECAR}", other.dumps())


def _same_name_other_tokens(folder: Path, name: str) -> None:
    side = Sidecar.loads((folder / f"{name}{SIDECAR}").read_bytes())
    other = Sidecar(side.model_key, side.namespace, (1, 2, 3), side.nbytes, side.sha256,
                    side.created, side.classes)  # fmt: skip
    write_atomic(folder / f"{name}{SIDECAR}", other.dumps())


@pytest.mark.parametrize(
    ("damage", "found_by"),
    [
        (_truncate, "scan"),
        (_flip, "load"),
        (_other_tokens, "load"),
        (_same_name_other_tokens, "scan"),
    ],
    ids=["truncated", "flipped byte", "sidecar of other tokens", "sidecar renamed"],
)
def test_a_damaged_entry_is_removed_and_never_loaded(
    model: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any, found_by: str
) -> None:
    written(tier(tmp_path), model, "", PROMPT)
    folder = tmp_path / KEY
    damage(folder, entry_name("", PROMPT))
    caplog.set_level(logging.WARNING)
    again = tier(tmp_path)
    found = again.nearest("", PROMPT + [1])
    if found_by == "scan":
        assert found is None
    else:
        assert found is not None and removals(caplog) == []
        assert again.load(*found) is None
    assert len(removals(caplog)) == 1, removals(caplog)
    assert again.stats()["damaged"] == 1
    assert sorted(p.name for p in folder.iterdir()) == ["model.json"]
    assert again.nearest("", PROMPT + [1]) is None


def test_an_entry_of_another_model_key_is_removed(
    model: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    written(tier(tmp_path), model, "", PROMPT)
    shutil.copytree(tmp_path / KEY, tmp_path / "k2")
    caplog.set_level(logging.WARNING)
    other = tier(tmp_path, "k2")
    assert other.nearest("", PROMPT) is None
    [line] = removals(caplog)
    assert "another model key (k1)" in line
    assert tier(tmp_path).nearest("", PROMPT + [1]) is not None  # its own folder is untouched


def test_old_temporary_files_are_removed_and_young_ones_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / KEY
    folder.mkdir()
    old, young = folder / "a.safetensors.1-aa.tmp", folder / "b.safetensors.2-bb.tmp"
    for path in (old, young):
        path.write_bytes(b"partial")
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    caplog.set_level(logging.WARNING)
    assert tier(tmp_path).stats()["entries"] == 0
    [line] = removals(caplog)
    assert old.name in line and not old.exists() and young.exists()


def test_eviction_removes_the_least_valuable_first(model: Any, tmp_path: Path) -> None:
    probe = tier(tmp_path / "probe")
    written(probe, model, "", PROMPT[:20])
    size = probe.stats()["bytes"]
    t = tier(tmp_path, max_bytes=int(3.5 * size))
    written(t, model, "session", PROMPT[:20], keep_hint=True)  # oldest, of a live session
    written(t, model, "reused", PROMPT[:20])
    written(t, model, "once", PROMPT[:20])
    found = t.nearest("reused", PROMPT)
    assert found is not None and t.load(*found) is not None  # loaded once: reused
    written(t, model, "new", PROMPT[:20])  # four do not fit: the one-off prompt leaves
    assert t.nearest("once", PROMPT) is None
    assert all(t.nearest(ns, PROMPT) is not None for ns in ("session", "reused", "new"))
    written(t, model, "newer", PROMPT[:20])  # then the least recently used one-off
    assert t.nearest("new", PROMPT) is None
    written(t, model, "live", PROMPT[:20], keep_hint=True)  # one-offs leave before the rest
    assert t.nearest("newer", PROMPT) is None
    written(t, model, "live2", PROMPT[:20], keep_hint=True)  # a reused one before a session's
    assert t.nearest("reused", PROMPT) is None
    assert all(t.nearest(ns, PROMPT) is not None for ns in ("session", "live", "live2"))
    assert t.stats()["bytes"] <= 3.5 * size and t.stats()["evicted"] == 4
    assert len(list((tmp_path / KEY).glob(f"*{DATA}"))) == 3


def test_nearest_finds_the_longest_usable_prefix_in_its_namespace(
    model: Any, tmp_path: Path
) -> None:
    t = tier(tmp_path)
    written(t, model, "a", PROMPT[:20])
    written(t, model, "a", PROMPT[:5] + [900, 901])
    written(t, model, "b", PROMPT[:30])

    def use(namespace: str, tokens: list[int], **kw: Any) -> int | None:
        found = t.nearest(namespace, tokens, **kw)
        return None if found is None else found[1]

    assert use("a", PROMPT) == 20
    assert use("a", PROMPT[:5] + [900, 7, 8]) == 6  # a longer entry, cut back
    assert use("a", PROMPT[:20]) == 19  # at least one token is left to process
    assert use("a", PROMPT[:20], left=5) == 15
    assert use("a", PROMPT, least=21) is None
    assert use("a", [5, 6, 7]) is None
    assert use("b", PROMPT) == 30 and use("c", PROMPT) is None
    # A longer entry of the same namespace replaces the one it extends, on disk too.
    written(t, model, "a", PROMPT[:40])
    assert not (tmp_path / KEY / f"{entry_name('a', PROMPT[:20])}{DATA}").exists()
    assert use("a", PROMPT) == 40 and t.stats()["entries"] == 3
    # It takes the standing of the one it extends: kept for a session, reused.
    written(t, model, "s", PROMPT[:10], keep_hint=True)
    found = t.nearest("s", PROMPT)
    assert found is not None and t.load(*found) is not None
    written(t, model, "s", PROMPT[:15])
    found = t.nearest("s", PROMPT)
    assert found is not None and found[1] == 15
    assert found[0].value()[:2] == (True, True) and found[0].hits == 1


def test_a_cache_that_cannot_be_cut_is_used_only_whole(model: Any, tmp_path: Path) -> None:
    t = tier(tmp_path)
    assert t.put("", PROMPT[:10], filled(model, PROMPT[:10], window=64))
    t.flush()
    found = t.nearest("", PROMPT)
    assert found is not None and found[1] == 10
    assert t.nearest("", PROMPT[:10]) is None  # not a strict prefix: nothing left to feed
    assert t.nearest("", PROMPT[:10] + [1], left=5) is not None  # whole, whatever `left`
    assert t.nearest("", PROMPT[:8]) is None
    back = t.load(*found)
    assert back is not None and type(back[0]).__name__ == "RotatingKVCache"
    expected = next_logits(model, filled(model, PROMPT[:10], window=64), PROMPT[10])
    np.testing.assert_allclose(next_logits(model, back, PROMPT[10]), expected, atol=1e-5)


def test_the_model_key_changes_with_a_model_file(
    loaded: tuple[Any, Any], tiny_model_dir: Path, tmp_path: Path
) -> None:
    model, tokenizer = loaded
    copy = shutil.copytree(tiny_model_dir, tmp_path / "tiny", copy_function=shutil.copy2)
    key = model_key(str(copy), model, tokenizer)
    assert len(key) == 16 and key == model_key(str(tiny_model_dir), model, tokenizer)
    config = copy / "config.json"
    later = config.stat().st_mtime + 10
    os.utime(config, (later, later))
    assert model_key(str(copy), model, tokenizer) != key
    assert model_key(str(tiny_model_dir), model, tokenizer, adapter=str(copy)) != key


def test_put_returns_before_the_write_and_flush_waits_for_it(
    model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, write = threading.Event(), kv_disk.write_cache

    def held_back(file: Any, cache: Any, meta: dict[str, str]) -> None:
        assert gate.wait(30)
        write(file, cache, meta)

    monkeypatch.setattr(kv_disk, "write_cache", held_back)
    t = tier(tmp_path)
    cache = filled(model, PROMPT)
    assert t.put("", PROMPT, cache)
    assert t.nearest("", PROMPT + [1]) is None
    assert not list((tmp_path / KEY).glob(f"*{SIDECAR}"))
    # The caller goes on with its own cache, over the positions handed over.
    trim_prompt_cache(cache, 10)
    model(mx.array([[3, 4]]), cache=cache)
    gate.set()
    t.flush()
    found = t.nearest("", PROMPT + [1])
    assert found is not None and found[1] == len(PROMPT)
    back = t.load(*found)
    assert back is not None
    expected = filled(model, PROMPT)
    assert np.array_equal(next_logits(model, back, 1), next_logits(model, expected, 1))
    t.close()


def test_two_tiers_share_a_folder(
    model: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = tier(tmp_path), tier(tmp_path)
    written(first, model, "", PROMPT)
    assert second.nearest("", PROMPT) is None  # not scanned yet
    assert second.scan() == 1
    found = second.nearest("", PROMPT + [1])
    assert found is not None and second.load(*found) is not None
    assert (tmp_path / KEY / "model.json").exists()
    second.flush()  # the use is recorded in the sidecar: a third ranks the entry alike
    third = tier(tmp_path).nearest("", PROMPT + [1])
    assert third is not None and third[0].hits == 1
    # Removed by the other between lookup and load: a miss, not an error.
    written(first, model, "x", PROMPT)
    second.scan()
    found = second.nearest("x", PROMPT + [1])
    assert found is not None
    for path in (tmp_path / KEY).glob(f"{found[0].name}.*"):
        path.unlink()
    caplog.set_level(logging.WARNING)
    assert second.load(*found) is None and removals(caplog) == []
    assert second.nearest("x", PROMPT + [1]) is None
