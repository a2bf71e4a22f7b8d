"""Finding an optimized BLAS, checking a named one, and reading back what a process maps."""

from __future__ import annotations

import _ctypes
import os
from pathlib import Path

import pytest

from omni.runtime.platform import blas


def test_the_first_debian_path_that_exists_wins(tmp_path: Path) -> None:
    paths = [tmp_path / "alt/libopenblas.so.0", tmp_path / "pthread/libopenblas.so.0"]
    assert blas.find_optimized(paths, cache="") is None
    paths[1].parent.mkdir()
    paths[1].write_bytes(b"")
    assert blas.find_optimized(paths, cache="") == paths[1]
    paths[0].parent.mkdir()
    paths[0].write_bytes(b"")
    assert blas.find_optimized(paths, cache="") == paths[0]


def test_else_the_linker_cache_names_the_best_openblas_of_this_word_size(tmp_path: Path) -> None:
    for name in ("serial.so", "threaded.so", "narrow.so"):
        (tmp_path / name).write_bytes(b"")
    cache = (
        "4 libs found in cache `/etc/ld.so.cache'\n"
        f"\tlibopenblas.so.0 (libc6,x86-64) => {tmp_path / 'serial.so'}\n"
        f"\tlibopenblasp.so.0 (libc6) => {tmp_path / 'narrow.so'}\n"  # 32-bit: not for us
        f"\tlibopenblasp.so.0 (libc6,x86-64) => {tmp_path / 'gone.so'}\n"  # listed, not there
        f"\tlibblas.so.3 (libc6,x86-64) => {tmp_path / 'threaded.so'}\n"  # maybe netlib's
    )
    assert blas.find_optimized([], cache) == tmp_path / "serial.so"
    cache += f"\tlibopenblasp.so.0 (libc6,x86-64) => {tmp_path / 'threaded.so'}\n"
    assert blas.find_optimized([], cache) == tmp_path / "threaded.so"
    assert blas.find_optimized([], "") is None


def test_debian_paths_name_the_selected_alternative_first() -> None:
    lib = Path("/usr/lib/aarch64-linux-gnu")
    assert blas.debian_paths("aarch64") == [
        lib / "libopenblas.so.0",
        lib / "openblas-pthread/libopenblas.so.0",
        lib / "openblas-openmp/libopenblas.so.0",
    ]


def test_a_named_library_must_load_and_have_cblas(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        blas.loadable(str(tmp_path / "nope.so"))
    text = tmp_path / "text.so"
    text.write_text("not a library")
    with pytest.raises(ValueError, match="cannot be loaded"):
        blas.loadable(str(text))
    with pytest.raises(ValueError, match="has no cblas_sgemm"):
        blas.loadable(str(_ctypes.__file__))  # a real shared object, no BLAS in it
    odd = tmp_path / "a b.so"
    odd.write_text("")
    with pytest.raises(ValueError, match="LD_PRELOAD"):
        blas.loadable(str(odd))


def test_preloaded_sets_the_environment_for_a_start_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    with blas.preloaded("/x/libopenblas.so.0"):
        assert os.environ["LD_PRELOAD"] == "/x/libopenblas.so.0"
    assert "LD_PRELOAD" not in os.environ
    monkeypatch.setenv("LD_PRELOAD", "/y/libjemalloc.so")
    with blas.preloaded("/x/libopenblas.so.0"):
        assert os.environ["LD_PRELOAD"] == "/x/libopenblas.so.0:/y/libjemalloc.so"
    assert os.environ["LD_PRELOAD"] == "/y/libjemalloc.so"
    with blas.preloaded(None):
        assert os.environ["LD_PRELOAD"] == "/y/libjemalloc.so"


def test_the_mapped_file_at_an_address() -> None:
    maps = (
        "7f0000000000-7f0000001000 r--p 00000000 08:01 11 /usr/lib/libopenblasp-r0.3.21.so\n"
        "7f0000001000-7f0000009000 r-xp 00001000 08:01 11 /usr/lib/libopenblasp-r0.3.21.so\n"
        "7f0000009000-7f000000a000 rw-p 00000000 00:00 0 \n"
    )
    assert blas.mapped_file(0x7F0000001234, maps) == "/usr/lib/libopenblasp-r0.3.21.so"
    assert blas.mapped_file(0x7F0000009100, maps) is None  # anonymous
    assert blas.mapped_file(0x10, maps) is None


def test_described_by_what_it_is() -> None:
    bundled = "/venv/site-packages/mlx_cpu.libs/libblas-bd8a282c.so.3.10.0"
    assert blas.describe(bundled) == f"bundled netlib reference ({bundled})"
    debian = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"
    assert blas.describe(debian) == f"openblas ({debian})"
    assert blas.describe("/opt/intel/libmkl_rt.so.2") == "mkl (/opt/intel/libmkl_rt.so.2)"
    assert blas.optimized(debian) and not blas.optimized(bundled) and not blas.optimized(None)
