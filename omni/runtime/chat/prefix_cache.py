"""Prefix (KV) cache reuse in the engine process: the KV caches of recent prompts and answers,
found again by the longest shared token prefix, in memory and (omni.runtime.chat.kv_disk) on
disk."""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import (
    KVCache,
    can_trim_prompt_cache,
    make_prompt_cache,
    trim_prompt_cache,
)

from omni.runtime.chat.kv_copies import cut
from omni.runtime.chat.kv_disk import DiskTier

# Shorter caches are not written to disk: prefilling them again costs little.
DISK_LEAST = 128
PREFILL_SAMPLE = 64  # the fewest tokens a prefill pass must take to measure the prefill rate

# MLX and mlx-lm leave these unannotated: typed here, where they are called.
_async_eval: Callable[[list[Any]], None] = mx.async_eval


class PrefixCache:
    """KV caches of recent prompts and answers, found by the longest shared token prefix, in
    namespaces (a request's prompt_cache_key), bounded by bytes (and by entries, if given).
    What leaves first, when room is needed: a one-off prompt's cache before a reused one's
    (half of it or more read again since it was kept: a template's opening, or a few words
    two prompts share, do not make one reused), and both before a session's (a chain, a
    conversation, a resent history, a prompt_cache_key: its next turn will ask for it); the
    least recently used first among equals.

    Not mlx-lm's LRUPromptCache: its trie search walks every cached path below the shared
    prefix, copying a list at each node, and it deep-copies a whole entry to use part of it.
    Both run on the engine process between two decode steps, for every new request: with 64
    requests sharing only a chat template's first tokens that cost a 1B model on an H200 40%
    of its batched throughput (bench/scheduler.py, in git history). Here a lookup compares
    the prompt with each entry's tokens in numpy, and a plain KV cache is reused as a slice.
    """

    def __init__(
        self,
        model: Any,
        entries: int,
        nbytes: int,
        min_reuse: int = 1,
        disk: DiskTier | None = None,
    ):
        self.model = model
        self.max_entries, self.max_bytes = entries, nbytes
        # A shorter shared prefix is not reused: the prompt is prefilled whole instead.
        self.min_reuse = max(1, min_reuse)
        self._entries: OrderedDict[tuple[str, tuple[int, ...]], _Entry] = OrderedDict()
        self._bytes = 0
        # The disk tier: each kept cache worth loading again is written there too (by its own
        # thread), so that it outlives this process; a lookup loads from it what memory lacks.
        self.disk = disk
        self.from_disk = 0  # of the last lookup's reused tokens, those the disk tier gave

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """What the kept caches hold."""
        return self._bytes

    def nearest(
        self, namespace: str, tokens: list[int], left: int = 1
    ) -> tuple[list[Any], list[int]]:
        """A KV cache sharing the longest usable prefix with `tokens` (of `min_reuse` tokens
        at least), and the tokens it still has to process: at least `left` (at least one: the
        model must see a token to predict the next). An entry that cannot be cut back (a
        sliding window past its size, a recurrent state) is usable only whole, as a prefix of
        `tokens` (then at least one is left, whatever `left` asks: feeding one more is cheaper
        than the whole prompt)."""
        self.from_disk = 0
        query = np.asarray(tokens)
        best, use = None, 0
        for key, entry in self._entries.items():  # newest last: ties go to it
            if key[0] != namespace:
                continue
            held = entry.tokens
            n = min(len(held), len(query))
            differ = np.flatnonzero(held[:n] != query[:n])
            common = int(differ[0]) if differ.size else n
            if entry.cuttable:
                usable = min(common, len(tokens) - left)
            else:
                # Whole or not at all: rather one token to feed than the whole prompt again.
                usable = len(held) if common == len(held) < len(tokens) else 0
            if usable >= self.min_reuse and usable >= use:
                best, use = key, usable
        if (loaded := self._from_disk(namespace, tokens, left, use)) is not None:
            return loaded
        if best is None:
            return make_prompt_cache(self.model), list(tokens)
        self._entries.move_to_end(best)
        found = self._entries[best]
        if 2 * use >= len(best[1]):  # most of it read again: not just a shared opening
            found.hits += 1
        return _prefix_of(found.cache, use, len(best[1])), list(tokens[use:])

    def _from_disk(
        self, namespace: str, tokens: list[int], left: int, use: int
    ) -> tuple[list[Any], list[int]] | None:
        """The disk tier's cache of a prefix longer than `use` (memory's best), when loading
        it is faster than prefilling what it adds; kept in memory from then on."""
        if self.disk is None:
            return None
        found = self.disk.nearest(namespace, tokens, left, max(self.min_reuse, use + 1))
        if found is None:
            return None
        entry, usable = found
        if not self.disk.rates.worth(usable - use, entry.nbytes):  # a load reads it whole
            return None
        cache = self.disk.load(entry, usable)
        if cache is None:
            return None
        self.insert(namespace, tokens[:usable], cache, entry.side.keep_hint, write=False)
        self.from_disk = usable
        return _prefix_of(cache, usable, usable), list(tokens[usable:])

    def insert(
        self,
        namespace: str,
        tokens: list[int],
        cache: list[Any],
        session: bool = False,
        write: bool = True,
    ) -> None:
        """Keep `cache` for reuse, keyed by exactly the tokens it holds (a cache that holds
        more than `tokens` is cut back to them, or not kept if it cannot be); `session`: a
        multi-turn session's, kept longer. An entry it extends leaves, its standing passed on.
        `write`: to the disk tier too, if loading it would beat prefilling it."""
        held = getattr(cache[0], "offset", len(tokens)) if cache else 0
        if held > len(tokens):
            if not can_trim_prompt_cache(cache):
                return
            trim_prompt_cache(cache, held - len(tokens))
            held = len(tokens)
        if held <= 0 or self.max_bytes <= 0:
            return
        key = (namespace, tuple(tokens[:held]))
        ids = np.asarray(key[1])
        cuttable = _plain(cache) or can_trim_prompt_cache(cache)
        hits = 0
        if cuttable:  # entries this one extends are of no more use
            for other, entry in list(self._entries.items()):
                shorter = entry.tokens
                n = len(shorter)
                if (
                    other[0] == namespace
                    and n <= held
                    and shorter[n - 1] == ids[n - 1]  # most entries differ here: a cheap test
                    and (shorter == ids[:n]).all()
                ):
                    session, hits = session or entry.session, max(hits, entry.hits)
                    self._drop(other)
        if key in self._entries:
            self._drop(key)
        # A cache cut out of a batch is a lazy copy that holds on to the whole batch's buffer
        # until it is computed: compute it now (without waiting), so that only its own bytes,
        # the ones counted here, stay held.
        _async_eval([c.state for c in cache])
        entry = _Entry(cache, sum(c.nbytes for c in cache), ids, cuttable, session, hits)
        self._entries[key] = entry
        self._bytes += entry.nbytes
        disk = self.disk
        if (
            write
            and disk is not None
            and held >= DISK_LEAST
            and disk.rates.worth(held, entry.nbytes)
        ):
            disk.put(namespace, list(key[1]), cache, session)
        while self._entries and (
            0 < self.max_entries < len(self._entries) or self._bytes > self.max_bytes
        ):
            self._drop(self._least_valued())

    def _least_valued(self) -> tuple[str, tuple[int, ...]]:
        """The entry to leave first: of the lowest standing (one-off, reused, a session's),
        the least recently used (the dict runs from least to most recently used)."""
        standing = {key: (e.session, e.hits > 0) for key, e in self._entries.items()}
        lowest = min(standing.values())
        return next(key for key, s in standing.items() if s == lowest)

    def _drop(self, key: tuple[str, tuple[int, ...]]) -> None:
        self._bytes -= self._entries.pop(key).nbytes

    def prefilled(self, tokens: int, seconds: float) -> None:
        """A prefill pass took `seconds` for `tokens`: what a disk load is weighed against
        (passes of a few tokens measure the step, not the prefill: left out)."""
        if self.disk is not None and tokens >= PREFILL_SAMPLE:
            self.disk.rates.prefilled(tokens, seconds)

    def close(self) -> None:
        """Finish the disk tier's writes."""
        if self.disk is not None:
            self.disk.close()


@dataclass(slots=True)
class _Entry:
    cache: list[Any]
    nbytes: int
    tokens: Any  # numpy array of the tokens the cache holds
    cuttable: bool  # can be cut back to any prefix (else only used whole)
    session: bool = False  # a multi-turn session's
    hits: int = 0  # times it was used since it was kept


def _plain(cache: list[Any]) -> bool:
    """Plain KV caches in every layer (no window, no recurrent state): cut by slicing."""
    return all(type(c) is KVCache for c in cache)


def _prefix_of(cache: list[Any], keep: int, held: int) -> list[Any]:
    """A cache of the first `keep` of the `held` tokens in `cache`, which stays as it was."""
    if _plain(cache):
        # Slices share the entry's memory; the first new token makes the cache grow into a
        # buffer of its own (KVCache concatenates), so the entry is never written to.
        return cut(cache, keep)
    copied = copy.deepcopy(cache)
    if keep < held:
        trim_prompt_cache(copied, held - keep)
    return copied
