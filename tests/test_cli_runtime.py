"""`omni serve --blas` and `--weights`: bad values stop it with one usage line; the engine
process says what BLAS it has mapped and what its weights are, and generates with them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from omni.runtime.platform import blas
from omni.testing.llama import build_tiny_llama
from tests.test_cli import omni, serving


def usage_errors(result: object) -> list[str]:
    stderr = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == 2 and "Traceback" not in stderr  # type: ignore[attr-defined]
    return [line for line in stderr.splitlines() if "error:" in line]


def test_a_blas_that_cannot_be_loaded_is_one_usage_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "libopenblas.so.0"
    assert usage_errors(omni("serve", "--blas", str(missing))) == [
        f"omni serve: error: argument --blas: '{missing}' (the flag or OMNI_BLAS): no such file"
    ]
    missing.write_text("not a library")
    [line] = usage_errors(omni("serve", "--blas", str(missing)))
    assert "argument --blas" in line and "cannot be loaded" in line
    monkeypatch.setenv("OMNI_BLAS", str(tmp_path / "gone.so"))
    [line] = usage_errors(omni("serve", "--db", str(tmp_path / "o.db")))
    assert "OMNI_BLAS" in line and "no such file" in line
    assert not (tmp_path / "o.db").exists()


def test_an_unknown_weights_format_is_one_usage_line(monkeypatch: pytest.MonkeyPatch) -> None:
    assert usage_errors(omni("serve", "--weights", "int3")) == [
        "omni serve: error: argument --weights: 'int3' (the flag or OMNI_WEIGHTS): "
        "expected one of auto, stored, float32"
    ]
    monkeypatch.setenv("OMNI_WEIGHTS", "fp32")
    [line] = usage_errors(omni("serve"))
    assert "OMNI_WEIGHTS" in line


@pytest.fixture(scope="module")
def quantized_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama with 4-bit weights, so that float32 is a conversion, not a no-op."""
    from mlx_lm import load
    from mlx_lm.utils import quantize_model, save_config, save_model

    out = build_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-4bit")
    model = load(str(out))[0]
    config = json.loads((out / "config.json").read_text())
    model, config = quantize_model(model, config, group_size=32, bits=4)
    save_model(out, model)
    save_config(config, out / "config.json")
    return out


def engine_line(log: Path) -> str:
    lines = [line for line in log.read_text().splitlines() if line.startswith("omni: engine:")]
    assert len(lines) == 1, log.read_text()
    return lines[0]


@pytest.mark.parametrize(
    ("setting", "weights", "mapped", "described"),
    [
        ("openblas", "float32", "openblas", "weights float32 (--weights float32)"),
        ("bundled", "stored", "bundled netlib reference", "weights 4-bit quantized"),
    ],
)
def test_the_engine_reports_the_blas_it_maps_and_generates_with_it(
    tmp_path: Path, quantized_tiny: Path, setting: str, weights: str, mapped: str, described: str
) -> None:
    preloads = setting == "openblas"
    if preloads:  # CI installs it (.ci/run): its absence is a failure here
        found = blas.find_optimized()
        assert found is not None, "no OpenBLAS installed (Debian: apt install libopenblas0-pthread)"
        setting, expected = str(found), os.path.realpath(found)
    else:
        expected = "/mlx_cpu.libs/libblas"
    log = tmp_path / "stderr"
    flags = ("--blas", setting, "--weights", weights)
    with serving(quantized_tiny, tmp_path / "omni.db", "warning", log, *flags) as (base, proc):
        body = {"model": "tiny-4bit", "input": "hi", "max_output_tokens": 4}
        done = httpx.post(f"{base}/v1/responses", json=body, timeout=60).json()
        server_maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert done["usage"]["output_tokens"] == 4  # it generated: as many as it was allowed
    line = engine_line(log)
    assert f"BLAS {mapped} (" in line and expected in line and described in line, line
    # With an optimized BLAS, one-row products go to its sgemv (CI has a C compiler: .ci/run).
    assert ("with one-row products as sgemv" in line) == preloads, line
    assert not preloads or expected not in server_maps  # the server's own process never loads it
    assert "omni-gemv" not in server_maps
