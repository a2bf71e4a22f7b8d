"""The overhead and concurrency benchmarks on an NVIDIA GPU with MLX's CUDA build.

Run on the lent H200 through ../shared/gpu/setup_and_run.sh with BENCH=bench/gpu.py (it installs
mlx, mlx-cuda-13 and mlx-lm there). GPU_LEVELS picks the concurrency levels (default 1..64);
GPU_CONCURRENCY_ARGS passes more flags to concurrency.py (e.g. --skip-peer); GPU_RUNS
names the runs (default attention,overhead,concurrency; `scheduler` adds bench/scheduler.py at
64 streams with prompts that share only the template, arriving at once, 1 and 16 a step;
`groups` prints the engine's prefill group on this device, then runs concurrency.py at 64 streams
for each GPU_GROUP_ARMS entry OMNI/RAW, Omni's prefill group / raw's, in that order (default
16/8,8/8,16/8,8/8,16/16; 8 rounds each), copied as gpu_groups_<i>_<omni>_<raw>.json). Builds a
random-weight bf16 model of Llama-3.2-1B's shape (random weights are fine for speed), then
runs bench/overhead.py and bench/concurrency.py on it and copies their JSON (and plots, where
matplotlib exists) to $OUT.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

LLAMA_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-5,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


def build(folder: Path) -> Path:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    from omni.engine.tiny import build_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    build_tokenizer(folder)
    model = llama.Model(
        llama.ModelArgs(**{k: v for k, v in LLAMA_1B.items() if k != "torch_dtype"})
    )
    params = {k: v.astype(mx.bfloat16) for k, v in tree_flatten(model.parameters())}
    n = sum(v.size for v in params.values())
    mx.save_safetensors(str(folder / "model.safetensors"), params)
    (folder / "config.json").write_text(json.dumps(LLAMA_1B, indent=2))
    print(f"built a random bf16 llama of {n / 1e9:.2f} B parameters in {folder}", flush=True)
    return folder


def run(script: str, *args: str, timeout: int, env: dict[str, str] | None = None) -> None:
    """`env`: more settings for the script's process."""
    start = time.perf_counter()
    cmd = [sys.executable, str(HERE / script), *args]
    print("==", " ".join(cmd), flush=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
        **(env or {}),
    }
    result = subprocess.run(cmd, timeout=timeout, env=env)
    print(f"== {script} rc={result.returncode} in {time.perf_counter() - start:.0f}s", flush=True)


def main() -> None:
    import mlx.core as mx

    print("device:", mx.default_device(), flush=True)
    out = Path(os.environ.get("OUT", "/tmp/out"))
    model = build(Path("/tmp/llama-1b-random"))
    levels = os.environ.get("GPU_LEVELS", "1,2,4,8,16,32,64")
    runs = os.environ.get("GPU_RUNS", "attention,overhead,concurrency").split(",")
    if "attention" in runs:
        run("attention.py", "--model", str(model), timeout=240)
    if "overhead" in runs:
        run("overhead.py", "--model", str(model), "--tokens", "128", "--runs", "3", timeout=240)
    extra = os.environ.get("GPU_CONCURRENCY_ARGS", "").split()  # e.g. --skip-peer
    args = ["--model", str(model), "--levels", levels, "--tokens", "128", "--rounds", "3", *extra]
    if "concurrency" in runs:
        run("concurrency.py", *args, timeout=420)
    if "groups" in runs:
        groups(model, out)
    if "scheduler" in runs:
        sched = ["--streams", "64", "--tokens", "128", "--prompts", "distinct", "--arrive", "1,16"]
        run("scheduler.py", "--model", str(model), *sched, timeout=300)
    for name in ("attention", "overhead", "concurrency", "scheduler"):
        for ext in ("json", "png"):
            src = HERE / "out" / f"{name}.{ext}"
            if src.exists():
                shutil.copy(src, out / f"gpu_{name}.{ext}")


def groups(model: Path, out: Path) -> None:
    """Omni's prefill group against raw's, alternating, at 64 streams (bench/README.md)."""
    from omni.engine.worker import prefill_group

    print(f"the engine's prefill group here: {prefill_group()}", flush=True)
    arms = os.environ.get("GPU_GROUP_ARMS", "16/8,8/8,16/8,8/8,16/16").split(",")
    for i, arm in enumerate(arms):
        omni, raw = arm.split("/")
        args = ["--model", str(model), "--levels", "64", "--tokens", "128", "--rounds", "8"]
        args += ["--skip-peer", "--raw-prefill-group", raw]
        src = HERE / "out" / "concurrency.json"
        before = src.stat().st_mtime if src.exists() else 0.0
        omni_env = {"BENCH_OMNI_ENV": f"OMNI_PREFILL_GROUP={omni}"}
        run("concurrency.py", *args, timeout=300, env=omni_env)
        if src.exists() and src.stat().st_mtime > before:  # not a failed arm's predecessor
            shutil.copy(src, out / f"gpu_groups_{i}_{omni}_{raw}.json")


if __name__ == "__main__":
    main()
