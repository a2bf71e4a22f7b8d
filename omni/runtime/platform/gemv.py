"""One-row float32 matrix products as matrix-vector products: a small forwarder, preloaded in
front of the optimized BLAS, that MLX's calls reach first.

MLX's CPU back end calls cblas_sgemm for every float32 product, decode's one-row ones too
(a token's activations times a weight matrix). OpenBLAS 0.3.21 (Debian 12's) packs the weight
for those as for any product, so a decode step reads every weight more than once; its sgemv
reads it once: SmolLM2-135M's 49152x576 output layer in 12.3 ms as one-row sgemm, 4.8 ms as
sgemv, on this project's 2-core machine. The forwarder sends the one-row products to the
BLAS's own sgemv and everything else to its sgemm (found with dlsym(RTLD_NEXT)). It is C
(nothing of Python's can stand between MLX and its BLAS), compiled by the machine's C compiler
when the engine starts; where there is none, products run as before.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omni.runtime.platform import blas

NAME = "libomni-gemv.so"

# C(1,N) = A(1,K) op(B): with op(B) = B^T, B is N x K and y = B x; else B is K x N and y = B^T x.
SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
typedef void (*sgemm_f)(int, int, int, int, int, int, float, const float *, int,
                        const float *, int, float, float *, int);
typedef void (*sgemv_f)(int, int, int, int, float, const float *, int, const float *, int,
                        float, float *, int);
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
static sgemm_f next_sgemm;
static sgemv_f next_sgemv;

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c,
                 int ldc) {
  if (!next_sgemm) {
    next_sgemv = (sgemv_f)dlsym(RTLD_NEXT, "cblas_sgemv");
    next_sgemm = (sgemm_f)dlsym(RTLD_NEXT, "cblas_sgemm");
  }
  if (order == ROW_MAJOR && m == 1 && next_sgemv) {
    int step = trans_a == TRANS ? lda : 1;
    if (trans_b == TRANS)
      next_sgemv(ROW_MAJOR, NO_TRANS, n, k, alpha, b, ldb, a, step, beta, c, 1);
    else
      next_sgemv(ROW_MAJOR, TRANS, k, n, alpha, b, ldb, a, step, beta, c, 1);
    return;
  }
  next_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
"""


def wanted() -> bool:
    """OMNI_GEMV=0 turns the forwarder off (for benchmarks that compare with and without)."""
    return os.environ.get("OMNI_GEMV", "1") != "0"


def compiler() -> str | None:
    return next((found for cc in ("cc", "gcc", "clang") if (found := shutil.which(cc))), None)


def build() -> Path | None:
    """The forwarder compiled into a folder of its own (the caller removes the folder once
    the process that preloads it has loaded it); None where it cannot be built."""
    cc = compiler()
    if cc is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="omni-gemv-"))
    source, library = folder / "gemv.c", folder / NAME
    source.write_text(SOURCE)
    command = [cc, "-O2", "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"]
    try:
        done = subprocess.run(command, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        done = None
    if done is None or done.returncode != 0 or not library.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return library


def forwarding(sgemm_file: str | None) -> bool:
    """Whether the cblas_sgemm MLX calls (the file holding it) is the forwarder."""
    return sgemm_file is not None and Path(sgemm_file).name == NAME


@contextmanager
def engine_libraries(setting: str) -> Iterator[Path | None]:
    """While within, a process started preloads what Omni's engine process does for the BLAS
    `setting` (blas.preload): that library and, in front of it, the forwarder where one can be
    built. Yields the forwarder (the caller removes its folder once the process has loaded it)."""
    library = blas.preload(setting)
    forwarder = build() if library is not None and wanted() else None
    with blas.preloaded(None if forwarder is None else str(forwarder), library):
        yield forwarder
