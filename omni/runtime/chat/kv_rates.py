"""Whether a KV cache on disk is worth loading: only when reading it is clearly faster than
computing it again, by the rates this machine has shown (disk reads and prefill, each a moving
average of what was measured)."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

# A load must take less than this share of the prefill it saves: loading has costs the read
# rate does not show (parsing, copying into place), and a wrong guess costs twice.
MARGIN = 0.5
PROBE_BYTES = 8 << 20


class Rates:
    """Moving averages of disk read bytes/s and prefill tokens/s (each new figure weighs
    `weight`); `gpu`: whether the model runs on a GPU, where prefill is fast enough that a
    load is not assumed worth it before prefill was measured."""

    def __init__(self, gpu: bool, weight: float = 0.3) -> None:
        self.gpu, self.weight = gpu, weight
        self.read_rate: float | None = None  # bytes/s
        self.prefill_rate: float | None = None  # tokens/s

    def read(self, nbytes: int, seconds: float) -> None:
        """`nbytes` were read from disk (and made ready to use) in `seconds`."""
        self.read_rate = self._mix(self.read_rate, nbytes, seconds)

    def prefilled(self, tokens: int, seconds: float) -> None:
        """The model prefilled `tokens` in `seconds`."""
        self.prefill_rate = self._mix(self.prefill_rate, tokens, seconds)

    def worth(self, tokens: int, nbytes: int) -> bool:
        """Whether loading `nbytes` takes less than MARGIN × the time to prefill `tokens`.
        Without both figures: yes on a CPU (prefill is slow), no on a GPU."""
        if self.read_rate is None or self.prefill_rate is None:
            return not self.gpu
        return nbytes / self.read_rate < MARGIN * tokens / self.prefill_rate

    def probe(self, folder: Path) -> float:
        """Seed the read rate: write PROBE_BYTES in `folder`, read them back, timed; the rate.
        The file is asked out of the page cache first; where the system does not do that, the
        rate is an upper bound, corrected by the loads that follow."""
        path = folder / f".probe.{os.getpid()}-{os.urandom(4).hex()}.tmp"
        data = os.urandom(PROBE_BYTES)
        try:
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                _uncache(f.fileno())
            start = time.perf_counter()
            with open(path, "rb") as f:
                _uncache(f.fileno())
                while f.read(1 << 20):
                    pass
            seconds = time.perf_counter() - start
        finally:
            path.unlink(missing_ok=True)
        self.read(PROBE_BYTES, seconds)
        assert self.read_rate is not None
        return self.read_rate

    def _mix(self, old: float | None, amount: float, seconds: float) -> float | None:
        if amount <= 0 or seconds <= 0:
            return old
        rate = amount / seconds
        return rate if old is None else old + self.weight * (rate - old)


def _uncache(fd: int) -> None:
    """Ask the system to read `fd` from the disk, not from memory (Linux, macOS)."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    elif (nocache := getattr(fcntl, "F_NOCACHE", None)) is not None:
        fcntl.fcntl(fd, nocache, 1)


def on_gpu() -> bool:
    """Whether MLX computes on a GPU here (Metal or CUDA)."""
    import mlx.core as mx

    return bool(mx.default_device() == mx.gpu or mx.cuda.is_available())
