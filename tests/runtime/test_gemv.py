"""The one-row forwarder (omni.runtime.platform.gemv): built by the machine's C compiler, preloaded
in front of OpenBLAS, it gives MLX's float32 products the same values as the BLAS's sgemm, for
one-row products (sent to sgemv, either side transposed, a strided row) and the others."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni.runtime.platform import blas, gemv

# Run where the preload is in force: products of every shape the forwarder tells apart, each
# with its float64 reference, and which files hold the symbols MLX calls.
PROBE = """
import json, sys
import numpy as np, mlx.core as mx
from omni.runtime.platform import blas
rng = np.random.default_rng(7)
cases = {}
w = rng.standard_normal((300, 70)).astype(np.float32)   # a weight stored N x K
x = rng.standard_normal((1, 70)).astype(np.float32)
cases["row @ w.T"] = (mx.array(x) @ mx.array(w).T, x.astype(float) @ w.T.astype(float))
v = rng.standard_normal((1, 300)).astype(np.float32)
cases["row @ w"] = (mx.array(v) @ mx.array(w), v.astype(float) @ w.astype(float))
t = rng.standard_normal((70, 5)).astype(np.float32)     # a row read down a column (transposed)
cases["column.T @ w.T"] = (
    mx.array(t).T[2:3] @ mx.array(w).T, t.T[2:3].astype(float) @ w.T.astype(float)
)
m = rng.standard_normal((4, 70)).astype(np.float32)
cases["rows @ w.T"] = (mx.array(m) @ mx.array(w).T, m.astype(float) @ w.T.astype(float))
q = rng.standard_normal((3, 1, 16)).astype(np.float32)  # attention's batched one-row products
k = rng.standard_normal((3, 40, 16)).astype(np.float32)
kt = k.transpose(0, 2, 1)
cases["batched"] = (mx.array(q) @ mx.array(k).transpose(0, 2, 1), q.astype(float) @ kt)
errors = {}
for name, (got, want) in cases.items():
    got = np.array(got)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    errors[name] = float(np.abs(got - want).max() / np.abs(want).max())
print(json.dumps({"errors": errors, "sgemm": blas.holder("cblas_sgemm"), "blas": blas.in_use()}))
"""


@pytest.fixture(scope="module")
def forwarder() -> Iterator[Path]:
    assert gemv.compiler() is not None, "no C compiler (Debian: apt install gcc)"  # .ci/run has one
    built = gemv.build()
    assert built is not None and built.name == gemv.NAME
    yield built
    shutil.rmtree(built.parent)


def probe(*preloads: str) -> dict[str, object]:
    env = {**os.environ, "LD_PRELOAD": ":".join(preloads)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_products_through_the_forwarder_equal_the_blas_s(forwarder: Path) -> None:
    openblas = blas.find_optimized()
    assert openblas is not None, "no OpenBLAS installed (Debian: apt install libopenblas0-pthread)"
    through = probe(str(forwarder), str(openblas))
    plain = probe(str(openblas))
    assert gemv.forwarding(through["sgemm"]) and not gemv.forwarding(plain["sgemm"])  # type: ignore[arg-type]
    real = os.path.realpath(openblas)
    assert through["blas"] == plain["blas"] == real  # the BLAS is named, not the forwarder
    for name, error in through["errors"].items():  # type: ignore[attr-defined]
        assert error < 1e-5, (name, error)
        assert plain["errors"][name] < 1e-5  # type: ignore[index]


def test_no_compiler_no_forwarder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gemv, "compiler", lambda: None)
    assert gemv.build() is None


def test_a_failed_build_leaves_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(gemv, "compiler", lambda: "/bin/false")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    assert gemv.build() is None
    assert list(tmp_path.iterdir()) == []


def test_omni_gemv_0_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gemv.wanted()
    monkeypatch.setenv("OMNI_GEMV", "0")
    assert not gemv.wanted()
