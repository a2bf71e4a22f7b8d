"""The overhead and concurrency benchmarks on an NVIDIA GPU with MLX's CUDA build.

Run on the lent H200 through ../shared/gpu/setup_and_run.sh with BENCH=bench/gpu.py (it installs
mlx, mlx-cuda-13 and mlx-lm there). It builds a random-weight bf16 model of Llama-3.2-1B's shape
(random weights are fine for speed), runs what GPU_RUNS names and copies the JSON (and plots,
where matplotlib exists) to $OUT (a device call returns 8 files at most). Settings:

- GPU_RUNS, comma-separated (default overhead,concurrency):
  - overhead, concurrency: those scripts (concurrency at GPU_LEVELS, default 1..64;
    GPU_ROUNDS: overhead's runs and concurrency's rounds, default 3).
  - chunks: bench/chunks.py, prefill chunk sizes 128-4096 for a prompt of 4,096 tokens; the
    runs after it give Omni's engine the chunk it picks (unless BENCH_OMNI_ENV sets one).
  - longprompt: bench/longprompt.py, 8 streams and a 2,000-token prompt, 16 rounds after one
    warm-up (GPU_LONGPROMPT_ARGS: more flags for it, a later flag wins).
  - messages: bench/messages.py, a Messages stream against a chat stream, 128 tokens,
    GPU_MESSAGES_ROUNDS interleaved rounds (default 31).
  - prefix_disk: bench/prefix_disk.py, a 4,000-token prefix, 3 rounds (GPU_PREFIX_DISK_ARGS:
    more flags for it).
  - groups: prints the engine's prefill group on this device, then runs concurrency.py at 64
    streams for each GPU_GROUP_ARMS entry OMNI/RAW, Omni's prefill group / raw's, in that order
    (default 16/8,8/8,16/8,8/8,16/16; 8 rounds each), copied as gpu_groups_<i>_<omni>_<raw>.json.
    GPU_GROUP_TRACE=1 also traces both engines' steps (under /tmp) and copies
    bench/timeline.py's account of each arm, gpu_groups_<i>_<omni>_<raw>_timeline.txt.
- GPU_OVERHEAD_ARGS: more flags for overhead.py (e.g. --engine: the engine alone as well).
- GPU_CONCURRENCY_ARGS: more flags for concurrency.py, groups' runs included (e.g. --skip-peer,
  --tokens 256: a later flag wins).
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

    from omni.testing.llama import build_tokenizer

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
    runs = os.environ.get("GPU_RUNS", "overhead,concurrency").split(",")
    if "chunks" in runs:
        sizes = [
            "--sizes",
            "128,256,512,1024,2048,4096",
            "--prompt-tokens",
            "4096",
            "--within",
            "0.95",
        ]
        run("chunks.py", "--model", str(model), *sizes, "--rounds", "5", timeout=240)
        # The runs after it use the chunk it picks (OMNI_PREFILL_CHUNK for Omni's engine).
        picked = HERE / "out" / "chunks.json"
        if picked.exists() and "OMNI_PREFILL_CHUNK" not in os.environ.get("BENCH_OMNI_ENV", ""):
            pick = json.loads(picked.read_text())["pick"]
            env = ",".join(
                e for e in (os.environ.get("BENCH_OMNI_ENV"), f"OMNI_PREFILL_CHUNK={pick}") if e
            )
            os.environ["BENCH_OMNI_ENV"] = env
            print(f"== the engine's chunk from here on: {pick}", flush=True)
    rounds = os.environ.get("GPU_ROUNDS", "3")  # overhead's runs, concurrency's rounds
    if "overhead" in runs:
        args = ["--model", str(model), "--tokens", "128", "--runs", rounds]
        args += os.environ.get("GPU_OVERHEAD_ARGS", "").split()  # e.g. --engine
        run("overhead.py", *args, timeout=400)
    extra = os.environ.get("GPU_CONCURRENCY_ARGS", "").split()  # e.g. --skip-peer
    args = ["--model", str(model), "--levels", levels, "--tokens", "128", "--rounds", rounds]
    args += extra
    if "concurrency" in runs:
        run("concurrency.py", *args, timeout=420)
    if "groups" in runs:
        groups(model, out, extra)
    if "longprompt" in runs:
        more = os.environ.get("GPU_LONGPROMPT_ARGS", "").split()
        run("longprompt.py", "--model", str(model), "--rounds", "16", *more, timeout=420)
    if "messages" in runs:
        more = ["--tokens", "128", "--rounds", os.environ.get("GPU_MESSAGES_ROUNDS", "31")]
        run("messages.py", "--model", str(model), *more, timeout=420)
    if "prefix_disk" in runs:
        more = ["--prefix-tokens", "4000", "--rounds", "3", "--write-rounds", "31"]
        more += os.environ.get("GPU_PREFIX_DISK_ARGS", "").split()
        run("prefix_disk.py", "--model", str(model), *more, timeout=440)
    for name in ("chunks", "overhead", "concurrency", "longprompt", "messages", "prefix_disk"):
        for ext in ("json", "png"):
            src = HERE / "out" / f"{name}.{ext}"
            if src.exists():
                shutil.copy(src, out / f"gpu_{name}.{ext}")


def groups(model: Path, out: Path, extra: list[str]) -> None:
    """Omni's prefill group against raw's, alternating, at 64 streams (CUDA_PREFILL_GROUP)."""
    from omni.runtime.chat.worker import prefill_group
    from omni.settings import engine_knobs

    print(
        f"the engine's prefill group here: {prefill_group(engine_knobs()['prefill_group'])}",
        flush=True,
    )
    arms = os.environ.get("GPU_GROUP_ARMS", "16/8,8/8,16/8,8/8,16/16").split(",")
    traced = os.environ.get("GPU_GROUP_TRACE") == "1"
    for i, arm in enumerate(arms):
        omni, raw = arm.split("/")
        name = f"gpu_groups_{i}_{omni}_{raw}"
        args = ["--model", str(model), "--levels", "64", "--tokens", "128", "--rounds", "8"]
        args += ["--skip-peer", "--raw-prefill-group", raw, *extra]
        omni_env = f"OMNI_PREFILL_GROUP={omni},OMNI_ENGINE_STATS=1"
        traces = (Path(f"/tmp/{name}_omni_trace.json"), Path(f"/tmp/{name}_raw_trace.json"))
        for t in traces:  # not a trace of an earlier run's arm of that name
            t.unlink(missing_ok=True)
        if traced:
            omni_env += f",OMNI_ENGINE_TRACE={traces[0]}"
            args += ["--trace", str(traces[1])]
        src = HERE / "out" / "concurrency.json"
        before = src.stat().st_mtime if src.exists() else 0.0
        run("concurrency.py", *args, timeout=300, env={"BENCH_OMNI_ENV": omni_env})
        if not (src.exists() and src.stat().st_mtime > before):  # a failed arm
            continue
        shutil.copy(src, out / f"{name}.json")
        if traced and all(t.exists() for t in traces):
            timeline(src, traces, out / f"{name}_timeline.txt")


def timeline(result: Path, traces: tuple[Path, Path], to: Path) -> None:
    """bench/timeline.py's account of one arm, printed and written to `to` (if it ran)."""
    cmd = [sys.executable, str(HERE / "timeline.py"), str(result), *map(str, traces)]
    try:
        account = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        print(f"== timeline.py timed out for {to.name}", flush=True)
        return
    print(account.stdout + account.stderr, flush=True)
    if account.returncode == 0:
        to.write_text(account.stdout)


if __name__ == "__main__":
    main()
