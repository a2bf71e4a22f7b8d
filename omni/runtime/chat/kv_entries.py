"""The disk tier's index entries and the rules over them: which part of an entry a prompt may
use, which entries a new one extends, and which leaves first (pure, over numpy token ids)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from omni.runtime.chat.kv_files import Sidecar


@dataclass(slots=True)
class DiskEntry:
    """An entry of the index: what its sidecar says, and how it has been used here."""

    name: str
    side: Sidecar
    tokens: Any  # numpy array of the token ids the cache holds
    last_use: float
    hits: int  # loads since it was written (or those of the entry it extends)

    @property
    def namespace(self) -> str:
        return self.side.namespace

    @property
    def nbytes(self) -> int:
        return self.side.nbytes

    @property
    def cuttable(self) -> bool:
        """Plain KV caches in every layer: usable cut back to any prefix (else only whole)."""
        return all(c == "KVCache" for c in self.side.classes)

    def value(self) -> tuple[bool, bool, float]:
        """Eviction order, lowest first: kept for a live session, reused, last use."""
        return (self.side.keep_hint, self.hits > 0, self.last_use)


def usable(entry: DiskEntry, query: Any, left: int) -> int:
    """How many of `entry`'s tokens a prompt of token ids `query` may use, leaving at least
    `left` (at least one) to process: the shared prefix of a cuttable entry; a whole other
    entry as a strict prefix, or nothing (PrefixCache.nearest's rule)."""
    held = entry.tokens
    n = min(len(held), len(query))
    differ = np.flatnonzero(held[:n] != query[:n])
    common = int(differ[0]) if differ.size else n
    if entry.cuttable:
        return max(0, min(common, len(query) - max(1, left)))
    return len(held) if common == len(held) < len(query) else 0


def extended(entries: Iterable[DiskEntry], namespace: str, ids: Any) -> list[DiskEntry]:
    """The entries of `namespace` whose tokens are a prefix of token ids `ids`."""
    return [
        other
        for other in entries
        if other.namespace == namespace
        and len(other.tokens) <= len(ids)
        and (other.tokens == ids[: len(other.tokens)]).all()
    ]
