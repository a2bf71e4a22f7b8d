"""Model load time: a chat model loaded on demand by a request, against raw mlx_lm.load.

`omni serve` (a subprocess on a temp db) serves a --models-dir holding a second model, which
no request has loaded yet. Each round: the time a streamed /v1/responses request for that model
takes to its `response.created` event (taken in while the weights load), and to its first text
delta (the load included), then a second request on the model now loaded; the model is then
unloaded (--max-loaded-models 1: a request for the default makes room). Raw: mlx_lm.load of
the same folder in a fresh process (its import of mlx-lm not counted), the same number of rounds.
    python bench/models.py [--model PATH] [--rounds 5] [--tokens 4]
Without --model, a tiny random-weight llama (4 layers, 256 wide). Prints medians and the ratio
first-token-with-load / a raw process's start and load, and writes bench/out/models.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402
from _server import model_or_tiny, start_omni  # noqa: E402

RAW = """
import sys, time
from mlx_lm import load
began = time.perf_counter()
load(sys.argv[1])
print(time.perf_counter() - began)
"""


def raw_load(path: str) -> tuple[float, float]:
    """(mlx_lm.load alone, the whole process: start, imports and load)."""
    began = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", RAW, path], capture_output=True, text=True)
    whole = time.perf_counter() - began
    if out.returncode:
        raise SystemExit(out.stderr)
    return float(out.stdout.strip().splitlines()[-1]), whole


def streamed(base: str, model: str, tokens: int) -> tuple[float, float]:
    """Seconds to response.created and to the first text delta of one streamed request."""
    body = {"model": model, "input": "Hello", "max_output_tokens": tokens, "stream": True}
    began = time.perf_counter()
    created = first = None
    with httpx.stream("POST", f"{base}/v1/responses", json=body, timeout=600) as res:
        for line in res.iter_lines():
            now = time.perf_counter() - began
            if line == "event: response.created" and created is None:
                created = now
            if line == "event: response.output_text.delta" and first is None:
                first = now
    assert created is not None and first is not None, "no created event or no text"
    return created, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path, _ = model_or_tiny(args.model, Path(tmp))
        shelf = Path(tmp) / "shelf"
        second = shelf / "second"
        shutil.copytree(path, second)  # the same weights under another id, loaded on demand
        proc, base = start_omni(
            path, Path(tmp) / "omni.db", "--models-dir", str(shelf), "--max-loaded-models", "1",
            "--no-hf-cache",
        )  # fmt: skip
        rounds: list[dict[str, float]] = []
        try:
            default = httpx.get(f"{base}/v1/models").json()["data"][0]["id"]
            for _ in range(args.rounds):
                created, first = streamed(base, "second", args.tokens)
                _, loaded_first = streamed(base, "second", args.tokens)
                streamed(base, default, args.tokens)  # second is unloaded to make room
                rounds.append({"created_s": created, "first_token_s": first,
                               "loaded_first_token_s": loaded_first})  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        raw = [raw_load(str(second)) for _ in range(args.rounds)]
        raws, wholes = [r[0] for r in raw], [r[1] for r in raw]

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    result: dict[str, Any] = {
        "model": args.model or "tiny (4 layers, 256 wide)",
        "rounds": rounds,
        "raw_load_s": raws,
        "raw_process_s": wholes,
        "median": {
            "created_s": med("created_s"),
            "first_token_s": med("first_token_s"),
            "loaded_first_token_s": med("loaded_first_token_s"),
            "raw_load_s": statistics.median(raws),
            "raw_process_s": statistics.median(wholes),
        },
    }
    m = result["median"]
    result["first_token_over_raw_process"] = m["first_token_s"] / m["raw_process_s"]
    lines = [
        ("raw mlx_lm.load alone", m["raw_load_s"]),
        ("raw: a process that imports mlx-lm and loads", m["raw_process_s"]),
        ("on demand: response.created", m["created_s"]),
        ("on demand: first token, the load included", m["first_token_s"]),
        ("loaded: first token", m["loaded_first_token_s"]),
    ]
    print(f"model: {result['model']}, {args.rounds} rounds (medians)")
    for label, seconds in lines:
        print(f"  {label:<46} {seconds * 1000:9.1f} ms")
    ratio = result["first_token_over_raw_process"]
    print(f"  first token on demand / a raw process's load: {ratio:.2f}x")
    write_results("models", result)
    print(json.dumps(result["median"]))


if __name__ == "__main__":
    main()
