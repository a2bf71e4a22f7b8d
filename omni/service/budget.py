"""What the loaded models take against the pool's memory budget, and whether one more would
pass it: each counts what its weights take in memory where its engine reports that, else the
size of the folder it was loaded from (measured once it is loaded: a default fetched on first
use has no size in the catalogue), else its size in the catalogue; unknown, nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omni.catalogue import GB, size_on_disk
from omni.ports.model import Model


def reported(model: Model | None) -> int | None:
    """The bytes `model`'s weights take in memory, where it reports them."""
    return None if model is None else model.memory_bytes


def on_disk(model: Model) -> int | None:
    """The bytes of the folder (or file) `model` was loaded from, where it names one here;
    else None. Reads the disk: once a load, off the event loop."""
    if not model.path:
        return None
    try:
        return size_on_disk(Path(model.path))
    except OSError:  # a file gone while it was counted: the catalogue's size stands
        return None


def footprint(model: Model | None, stored: int | None, catalogued: int | None) -> int:
    """What a model takes (or will) against the budget: its report, else `stored` (on_disk's
    answer), else `catalogued` (the catalogue's size); none known: nothing."""
    return reported(model) or stored or catalogued or 0


@dataclass(frozen=True, slots=True)
class Budget:
    """The bounds on the loaded models together: `memory` bytes (None: no bound by memory)
    and, where one is set, a `count`."""

    memory: int | None = None
    count: int | None = None

    def over(self, taken: Sequence[int], size: int) -> bool:
        """Loading a model of `size` beside ones of `taken` sizes would pass a bound (alone,
        it never does)."""
        if not taken:
            return False
        if self.count is not None and len(taken) >= self.count:
            return True
        return self.memory is not None and sum(taken) + size > self.memory

    def describe(self, taken: Sequence[int]) -> str:
        """What the loaded models of `taken` sizes take, for the log: "2 loaded, 4.1 of 8.0 GB"."""
        bound = "" if self.memory is None else f" of {self.memory / GB:.1f}"
        return f"{len(taken)} loaded, {sum(taken) / GB:.1f}{bound} GB"
