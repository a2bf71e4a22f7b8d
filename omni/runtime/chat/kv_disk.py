"""The disk tier of the prefix (KV) cache: one model's KV caches in a folder that outlives the
process, found again by the longest shared token prefix, as the memory tier finds its own.

The folder (kv_files) is `<root>/<model_key>/`; the key names the model as run (its files, chat
template, KV layout and weight dtypes), so an entry of another model, or of this one changed,
is never loaded. Entries are written by a thread of their own, each all or nothing (written
aside, synced, renamed; the sidecar last), and verified when loaded (checksum, token ids):
several servers may share the folder, and a crash mid-write leaves nothing that loads.

Eviction keeps the folder within `max_bytes` and removes the entry of lowest value first, where
value orders by (kept for a live session, loaded since it was written, last use): the caches of
live sessions, then prefixes that were reused, outlive one-off prompts; within each, the least
recently used leave first (the memory tier's order). An entry that a newly written one extends
(same namespace, its tokens a prefix of the new one's) is of no more use and is removed, its
standing passed on to the new one, as the memory tier does."""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import load_prompt_cache

from omni.runtime.chat.kv_copies import HostCache, cut, held, snapshot, to_host
from omni.runtime.chat.kv_entries import DiskEntry, extended, usable
from omni.runtime.chat.kv_files import (
    DATA,
    MODEL,
    SIDECAR,
    TMP,
    Sidecar,
    entry_name,
    sha256_of,
    temporary,
    write_atomic,
    write_model,
)
from omni.runtime.chat.kv_format import write_cache
from omni.runtime.chat.kv_keys import model_key
from omni.runtime.chat.kv_rates import Rates, on_gpu

__all__ = ["DiskEntry", "DiskTier", "Rates", "model_key"]

log = logging.getLogger(__name__)

YOUNG = 60.0  # seconds: a temporary file younger than this may be another process's write
QUEUED = 8  # writes waiting at most; more are dropped (the memory tier still holds them)

# mlx-lm leaves these unannotated: typed here, where they are called.
_load: Callable[..., tuple[list[Any], dict[str, str]]] = load_prompt_cache


@dataclass(frozen=True, slots=True)
class _Touch:
    entry: DiskEntry


@dataclass(frozen=True, slots=True)
class _Write:
    namespace: str
    tokens: tuple[int, ...]
    cache: HostCache  # cut to `tokens`
    keep_hint: bool


class DiskTier:
    """The entries of one model key in `folder/model_key/`, bounded by `max_bytes`."""

    def __init__(
        self,
        folder: Path,
        model_key: str,
        max_bytes: int,
        *,
        model_id: str = "",
        model_path: str = "",
        rates: Rates | None = None,
    ) -> None:
        self.dir = folder / model_key
        self.key, self.max_bytes = model_key, max_bytes
        self.model_id, self.model_path = model_id, model_path
        self.rates = rates if rates is not None else Rates(on_gpu())
        self._index: dict[str, DiskEntry] = {}
        self._lock = threading.Lock()  # the index: the writer thread changes it too
        self._queue: queue.Queue[_Write | _Touch | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._counts = dict.fromkeys(
            ("hits", "misses", "loads", "tokens_loaded", "bytes_written", "evicted", "damaged"), 0
        )
        self._load_seconds = 0.0

    # The index.

    def scan(self) -> int:
        """Index what is on disk for this key; remove what cannot be loaded (a damaged,
        partial or foreign entry, an old temporary file). How many entries there are."""
        self.dir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        found: dict[str, DiskEntry] = {}
        sides = set()
        for path in self.dir.iterdir():
            if path.name == MODEL:
                continue
            if TMP in path.suffixes:
                if _age(path, now) > YOUNG:
                    self._remove(path, "a temporary file left by an unfinished write")
            elif path.suffix == SIDECAR:
                sides.add(path.stem)
                if (entry := self._indexed(path)) is not None:
                    found[entry.name] = entry
        for path in self.dir.glob(f"*{DATA}"):
            if path.stem not in sides and _age(path, now) > YOUNG:
                self._remove(path, "a data file without its sidecar")
        with self._lock:
            self._index = found
            return len(found)

    def _indexed(self, path: Path) -> DiskEntry | None:
        """The entry of a sidecar, or None (and it is removed) if it cannot be used."""
        data = path.with_suffix(DATA)
        try:
            side = Sidecar.loads(path.read_bytes())
            size = data.stat().st_size
            stamp = path.stat().st_mtime
        except FileNotFoundError:  # another process removed it meanwhile, or no data file
            reason = "a sidecar without its data file" if path.exists() else ""
        except (OSError, ValueError) as exc:
            reason = f"an unreadable sidecar ({exc})"
        else:
            if side.model_key != self.key:
                reason = f"an entry of another model key ({side.model_key})"
            elif entry_name(side.namespace, side.tokens) != path.stem:
                reason = "a sidecar whose tokens are not its name's"
            elif size != side.nbytes:
                reason = f"a data file of {size} bytes where {side.nbytes} were written"
            else:
                tokens = np.asarray(side.tokens, dtype=np.int64)
                return DiskEntry(path.stem, side, tokens, stamp, side.hits)
        if reason:
            self._remove(path, reason)
        return None

    def entries(self) -> list[DiskEntry]:
        """What the index holds now."""
        with self._lock:
            return list(self._index.values())

    def nearest(
        self, namespace: str, tokens: list[int], left: int = 1, least: int = 1
    ) -> tuple[DiskEntry, int] | None:
        """The entry sharing the longest usable prefix with `tokens` (`least` tokens at least)
        and how many of its tokens to use, leaving at least `left` (at least one) to process.
        An entry that is not plain KV caches is used only whole, as a strict prefix. As
        PrefixCache.nearest."""
        query = np.asarray(tokens, dtype=np.int64)
        best: DiskEntry | None = None
        use = 0
        with self._lock:
            entries = sorted(self._index.values(), key=lambda e: e.last_use)  # ties: newest
        for entry in entries:
            if entry.namespace == namespace and (n := usable(entry, query, left)) >= use:
                best, use = entry, n
        if best is None or use < max(1, least):
            self._counts["misses"] += 1
            return None
        self._counts["hits"] += 1
        return best, use

    # Reading.

    def load(self, entry: DiskEntry, keep: int) -> list[Any] | None:
        """The entry's KV cache cut to its first `keep` tokens, or None: its files are gone
        (another process removed them), or damaged (then removed, with one log line)."""
        start = time.perf_counter()
        data = self.dir / f"{entry.name}{DATA}"
        try:
            if sha256_of(data) != entry.side.sha256:
                return self._damaged(entry, "its checksum differs")
            cache, meta = _load(str(data), return_metadata=True)
        except FileNotFoundError:
            self._forget(entry)
            self._counts["misses"] += 1
            return None
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            return self._damaged(entry, f"it does not load ({exc})")
        if meta.get("tokens") != json.dumps(list(entry.side.tokens)):
            return self._damaged(entry, "its token ids are not its sidecar's")
        if meta.get("model_key") != self.key:
            return self._damaged(entry, "it was written for another model key")
        held = len(entry.tokens)
        if not 0 < keep <= held or (keep < held and not entry.cuttable):
            raise ValueError(f"cannot use {keep} of the {held} tokens of a disk entry")
        if keep < held:
            cache = cut(cache, keep)
        mx.eval([c.state for c in cache])
        seconds = time.perf_counter() - start
        self.rates.read(entry.nbytes, seconds)
        entry.hits += 1
        entry.last_use = time.time()
        self._counts["loads"] += 1
        self._counts["tokens_loaded"] += keep
        self._load_seconds += seconds
        self._hand(_Touch(entry))
        return cache

    def _touch(self, entry: DiskEntry) -> None:
        """Record a use in the sidecar (its hits, and its mtime as the last use), so that
        another process, or this one restarted, ranks the entry alike."""
        with self._lock:
            if self._index.get(entry.name) is not entry:  # evicted meanwhile
                return
            entry.side = side = entry.side.used()
        write_atomic(self.dir / f"{entry.name}{SIDECAR}", side.dumps())

    def _damaged(self, entry: DiskEntry, reason: str) -> list[Any] | None:
        self._forget(entry)
        self._remove(self.dir / f"{entry.name}{SIDECAR}", reason)
        (self.dir / f"{entry.name}{DATA}").unlink(missing_ok=True)
        self._counts["misses"] += 1
        return None

    # Writing.

    def put(
        self, namespace: str, tokens: list[int], cache: list[Any], keep_hint: bool = False
    ) -> bool:
        """Hand the cache of `tokens` to the writer (the cache stays the caller's, unchanged);
        False if it is not written: nothing to write, a cache holding other tokens than
        `tokens` that cannot be cut to them, or too many writes waiting."""
        if not cache or not tokens or self._queue.qsize() >= QUEUED:
            return False
        copy = snapshot(cache, len(tokens))
        if copy is None:
            return False
        ids = tuple(tokens[: held(copy, len(tokens))])
        self._hand(_Write(namespace, ids, to_host(copy), keep_hint))
        return True

    def _hand(self, job: _Write | _Touch) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_all, name="kv-disk", daemon=True)
            self._writer.start()
        self._queue.put(job)

    def flush(self) -> None:
        """Wait until every write handed over so far is done."""
        self._queue.join()

    def close(self) -> None:
        """Finish the writes handed over, then stop the writer."""
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join()
            self._writer = None

    def _write_all(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                if isinstance(job, _Touch):
                    self._touch(job.entry)
                else:
                    self._write(job)
            except Exception:  # a full disk, a folder removed: the entry is not kept
                log.warning("kv disk: an entry was not written", exc_info=True)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _write(self, job: _Write) -> None:
        name = entry_name(job.namespace, job.tokens)
        self.dir.mkdir(parents=True, exist_ok=True)
        if not (self.dir / MODEL).exists():
            write_model(self.dir, self.key, self.model_id, self.model_path)
        sidecar = self.dir / f"{name}{SIDECAR}"
        if sidecar.exists():  # written before (by this process or another): index it
            if (entry := self._indexed(sidecar)) is not None:
                self._add(entry)
            return
        data = self.dir / f"{name}{DATA}"
        tmp = temporary(data)
        meta = {"model_key": self.key, "namespace": job.namespace,
                "tokens": json.dumps(list(job.tokens))}  # fmt: skip
        try:
            with open(tmp, "wb") as f:  # from host memory: no MLX call in this thread
                write_cache(f, job.cache, meta)
                f.flush()
                os.fsync(f.fileno())
            size = tmp.stat().st_size
            if size > self.max_bytes:
                return
            digest = sha256_of(tmp)
            os.replace(tmp, data)
        finally:
            tmp.unlink(missing_ok=True)
        classes = tuple(c.__name__ for c in job.cache.classes)
        ids = np.asarray(job.tokens, dtype=np.int64)
        keep, hits = self._standing(job.namespace, ids, job.keep_hint, classes)
        side = Sidecar(self.key, job.namespace, job.tokens, size, digest, time.time(), classes,
                       keep, hits)  # fmt: skip
        write_atomic(sidecar, side.dumps())
        self._counts["bytes_written"] += size
        self._add(DiskEntry(name, side, ids, time.time(), hits))

    def _standing(
        self, namespace: str, ids: Any, keep: bool, classes: tuple[str, ...]
    ) -> tuple[bool, int]:
        """The keep hint and hits of a new entry: its own, or those of an entry it extends."""
        if any(c != "KVCache" for c in classes):
            return keep, 0
        hits = 0
        with self._lock:
            for other in extended(self._index.values(), namespace, ids):
                keep, hits = keep or other.side.keep_hint, max(hits, other.hits)
        return keep, hits

    def _add(self, entry: DiskEntry) -> None:
        """Index a written entry; remove those it extends, then the least valuable while the
        folder holds more than max_bytes."""
        with self._lock:
            self._index[entry.name] = entry
            if entry.cuttable:
                for other in extended(self._index.values(), entry.namespace, entry.tokens):
                    if other is not entry:
                        self._drop(other)
            held = sum(e.nbytes for e in self._index.values())
            for other in sorted(self._index.values(), key=DiskEntry.value):
                if held <= self.max_bytes:
                    break
                if other is not entry:
                    held -= other.nbytes
                    self._drop(other)

    def _drop(self, entry: DiskEntry) -> None:
        """Remove an entry the tier no longer wants (the lock held): the sidecar first, so
        that no other process loads it half-removed."""
        self._index.pop(entry.name, None)
        (self.dir / f"{entry.name}{SIDECAR}").unlink(missing_ok=True)
        (self.dir / f"{entry.name}{DATA}").unlink(missing_ok=True)
        self._counts["evicted"] += 1

    def _forget(self, entry: DiskEntry) -> None:
        with self._lock:
            self._index.pop(entry.name, None)

    def _remove(self, path: Path, reason: str) -> None:
        """Remove a file the tier cannot use (and a sidecar's data file), with one log line."""
        log.warning("kv disk: removed %s: %s", path.name, reason)
        path.unlink(missing_ok=True)
        if path.suffix == SIDECAR:
            path.with_suffix(DATA).unlink(missing_ok=True)
        with self._lock:
            self._counts["damaged"] += 1

    def stats(self) -> dict[str, float]:
        """For /metrics: what the tier holds (entries, bytes) and what it did: hits and misses
        (lookups that found an entry or not, and loads that found its files gone or damaged),
        loads, load_seconds, tokens_loaded, bytes_written, evicted (for room, or extended by a
        longer entry) and damaged (files removed as unusable)."""
        with self._lock:
            entries = len(self._index)
            nbytes = sum(e.nbytes for e in self._index.values())
        return {"entries": entries, "bytes": nbytes, **self._counts,
                "load_seconds": self._load_seconds}  # fmt: skip


def _age(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
