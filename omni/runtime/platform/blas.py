"""The BLAS under the engine's matrix products: on Linux with MLX's CPU build, an optimized one
where one is installed, preloaded into the engine process alone.

MLX's CPU wheel links netlib's reference BLAS (mlx_cpu.libs/libblas-*.so): float32 matrix
products at ~8 GFLOP/s on this project's 2-core machine, ~250 with Debian's OpenBLAS. Preloaded
(LD_PRELOAD), a library's cblas_* symbols come first in the dynamic linker's global scope, ahead
of the ones libmlx brought, so MLX calls them. The engine is a spawned process, which execs with
the environment it is started with: the server's own process never loads it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

AUTO = "auto"
BUNDLED = "bundled"

# OpenBLAS's names, best first: Fedora's libopenblasp is its threaded build, its libopenblas
# the serial one; elsewhere libopenblas.so.0 is the threaded build.
OPENBLAS_NAMES = ("libopenblasp.so.0", "libopenblas.so.0", "libopenblaso.so.0")


def debian_paths(machine: str | None = None) -> list[Path]:
    """Where Debian and Ubuntu put OpenBLAS (libopenblas0-pthread, -openmp): the alternative
    the system selected, then each build's own folder."""
    lib = Path("/usr/lib") / f"{machine or platform.machine()}-linux-gnu"
    builds = [lib / f"openblas-{kind}/libopenblas.so.0" for kind in ("pthread", "openmp")]
    return [lib / "libopenblas.so.0", *builds]


def find_optimized(paths: Sequence[Path] | None = None, cache: str | None = None) -> Path | None:
    """The first of `paths` (Debian's) that is a file, else the best OpenBLAS of this word
    size that `cache` (`ldconfig -p`'s listing) names; None: none installed."""
    for path in debian_paths() if paths is None else paths:
        if path.is_file():
            return path
    found: dict[str, Path] = {}
    wide = sys.maxsize > 2**32
    for line in (ldconfig_cache() if cache is None else cache).splitlines():
        entry, arrow, target = line.partition(" => ")
        name, _, flags = entry.strip().partition(" ")
        if arrow and name in OPENBLAS_NAMES and ("64" in flags) == wide:  # "(libc6,x86-64)"
            if Path(target.strip()).is_file():
                found.setdefault(name, Path(target.strip()))
    return next((found[name] for name in OPENBLAS_NAMES if name in found), None)


def ldconfig_cache() -> str:
    """The dynamic linker's cache of libraries (empty where there is none to read)."""
    tool = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        done = subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout


# Run in a process of its own: loading the library here would put it (and its threads) in
# the server's process.
_PROBE = """import ctypes, sys
try:
    ctypes.CDLL(sys.argv[1]).cblas_sgemm
except OSError as exc:
    sys.exit(f"cannot be loaded ({exc})")
except AttributeError:
    sys.exit("has no cblas_sgemm: not a BLAS MLX can call")
"""


def loadable(path: str) -> str:
    """`path` made absolute, once a fresh process has loaded it and found its cblas_sgemm;
    otherwise ValueError saying why."""
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        raise ValueError("no such file")
    if any(c in full for c in ": \t\n"):
        raise ValueError("LD_PRELOAD cannot name a path with a colon or a space")
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PROBE, full], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"the probe exited {done.returncode}"]
        raise ValueError(lines[-1])
    return full


def preload(setting: str) -> str | None:
    """The library the engine process preloads for `setting` (auto, bundled, or a path that
    `loadable` passed); None: MLX's own."""
    if setting == BUNDLED or not cpu_build():
        return None
    if setting == AUTO:
        found = find_optimized()
        return None if found is None else str(found)
    return setting


def cpu_build() -> bool:
    """Linux with MLX's CPU back end alone: with CUDA or Metal the matrix products run on the
    GPU (and on macOS MLX's CPU has Accelerate)."""
    if not sys.platform.startswith("linux"):
        return False
    import mlx.core as mx

    return not (mx.cuda.is_available() or mx.metal.is_available())


@contextmanager
def preloaded(*paths: str | None) -> Iterator[None]:
    """LD_PRELOAD names `paths` (the first searched first) while a process is started (a
    spawned one execs with this environment), then is as it was: the server's own environment
    keeps no trace of them."""
    names = [p for p in paths if p is not None]
    if not names:
        yield
        return
    before = os.environ.get("LD_PRELOAD")
    os.environ["LD_PRELOAD"] = ":".join([*names, before] if before else names)
    try:
        yield
    finally:
        if before is None:
            del os.environ["LD_PRELOAD"]
        else:
            os.environ["LD_PRELOAD"] = before


def in_use() -> str | None:
    """The BLAS library MLX's matrix products run on: the file holding the cblas_sgemv this
    process finds (omni.runtime.platform.gemv's forwarder, preloaded in front, defines cblas_sgemm
    alone)."""
    return holder("cblas_sgemv")


def holder(symbol: str) -> str | None:
    """The file holding the `symbol` MLX calls, found in this process's memory map: a
    preloaded one is in the global scope, which the dynamic linker searches before libmlx's
    own libraries; without one it is libmlx's. None: MLX calls none."""
    import mlx.core as mx

    try:
        function = getattr(ctypes.CDLL(None), symbol)
    except AttributeError:
        try:
            function = getattr(ctypes.CDLL(mx.__file__), symbol)  # its libraries, in load order
        except (AttributeError, OSError):
            return None
    address = ctypes.cast(function, ctypes.c_void_p).value or 0
    return mapped_file(address, Path("/proc/self/maps").read_text())


def mapped_file(address: int, maps: str) -> str | None:
    """The file mapped at `address` in a /proc/<pid>/maps listing."""
    for line in maps.splitlines():
        span, *rest = line.split(maxsplit=5)
        low, high = (int(x, 16) for x in span.split("-"))
        if low <= address < high and len(rest) == 5:
            return rest[4]
    return None


def describe(path: str | None) -> str:
    """A BLAS library's file as the start-up line names it: which one, and where."""
    if path is None:
        return "none"
    name = f"{Path(path).parent.name}/{Path(path).name}".lower()  # openblas-pthread/libblas.so.3
    kinds = {"openblas": "openblas", "mkl": "mkl", "blis": "blis"}
    kind = next((k for part, k in kinds.items() if part in name), None)
    if kind is None:
        kind = "bundled netlib reference" if "mlx_cpu.libs" in path else Path(path).name
    return f"{kind} ({path})"


def optimized(path: str | None) -> bool:
    """Whether `path` is another BLAS than MLX's bundled reference one."""
    return path is not None and "mlx_cpu.libs" not in path
