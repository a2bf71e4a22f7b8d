"""The engine's scheduler in-process against raw mlx-lm BatchGenerator: no HTTP, no server
process, the same prompts. It separates what the scheduler costs (prefix cache, per-request
samplers, the solo path, jobs arriving a few at a time) from what the server around it costs.

    python bench/scheduler.py [--model PATH] [--streams 64] [--tokens 128]
                              [--rounds 3] [--arrive 1,8] [--prefill-group G]

Runs, each with one unmeasured warm-up round, then --rounds measured ones (median):
- raw: a BatchGenerator gets all N prompts at once, greedy (as bench/concurrency.py's raw).
- scheduler, at once: omni.runtime.batching.BatchScheduler gets all N jobs in one receive.
- scheduler, arriving: --arrive jobs per step (as HTTP requests trickle in), with the
  scheduler gathering arrivals into prefill groups (its default) and without.
- scheduler, arriving (the last --arrive), no prefix cache: the same with the prefix cache off.
Both sides prefill --prefill-group prompts at a time (default: the engine's own on this device,
omni.runtime.worker.prefill_group: 16 on CUDA, else 8). Prints tokens/s and the mean decode step
per run; writes bench/out/scheduler.json and .png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _plot import Bars, write_results  # noqa: E402
from _server import chat_ids  # noqa: E402

from omni.runtime import wire  # noqa: E402
from omni.settings import EngineSettings  # noqa: E402

TOPICS = ["a lighthouse", "a robot", "snow", "a market", "chess", "a violin", "a train", "bees"]


class FakeConn:
    """The scheduler's side of the pipe: hands it jobs (at most `per_step` a receive) and
    counts what it sends back."""

    def __init__(self, per_step: int):
        self.inbox: deque[wire.Request] = deque()
        self.per_step = per_step
        self.taken = 0
        self.tokens = 0
        self.finished = 0
        self.on_round_end: Any = None

    def poll(self, timeout: float | None = None) -> bool:
        if self.inbox and self.taken < self.per_step:
            return True
        self.taken = 0  # the next receive (next step) may take more
        return False

    def recv(self) -> wire.Request:
        self.taken += 1
        return self.inbox.popleft()

    def send(self, outputs: list[wire.Output]) -> None:
        for out in outputs:
            if isinstance(out, wire.Token):
                self.tokens += 1
            elif isinstance(out, wire.Finished):
                self.finished += 1
        if self.on_round_end is not None:
            self.on_round_end()


def run_scheduler(
    model: Any,
    tokenizer: Any,
    prompts: Callable[[int], list[list[int]]],
    per_step: int,
    cache_entries: int,
    gather_s: float = EngineSettings.gather_s,
) -> tuple[list[float], dict[str, float]]:
    from omni.jobs import Sampling
    from omni.runtime.batching import BatchScheduler
    from omni.runtime.generation import PrefixCache
    from omni.runtime.observe import StepStats
    from omni.runtime.worker import min_reuse

    cache = PrefixCache(model, cache_entries, 8 << 30, min_reuse())  # as the engine does
    n = len(prompts(0))
    observer = StepStats(time_prefill=True)
    scheduler = BatchScheduler(
        model, tokenizer, cache, n, gather_s, observer, prefill_group=ARGS.prefill_group
    )
    conn = FakeConn(per_step)
    rounds = ARGS.rounds + 1
    walls: list[float] = []
    state = {"round": 0, "start": 0.0, "tokens": 0, "next_id": 0}

    def start_round() -> None:
        state["start"], state["tokens"] = time.perf_counter(), conn.tokens
        for p in prompts(state["round"]):
            job = wire.Spec(
                state["next_id"],
                p,
                [],
                "",
                Sampling(temperature=0.0, max_tokens=ARGS.tokens),
            )
            conn.inbox.append(job)
            state["next_id"] += 1

    def on_send() -> None:
        if conn.finished < n * (state["round"] + 1):
            return
        tokens = conn.tokens - state["tokens"]
        wall = time.perf_counter() - state["start"]
        if state["round"] > 0:
            walls.append(tokens / wall)
        state["round"] += 1
        if state["round"] < rounds:
            start_round()
        else:
            conn.inbox.append(wire.Close())

    conn.on_round_end = on_send
    start_round()
    scheduler.run(conn)  # type: ignore[arg-type]
    stats = dict(observer.stats)
    steps = stats.get("steps", 1)
    stats["step_ms"] = 1000 * stats.get("step_s", 0) / steps
    stats["mean_batch"] = stats.get("batch_tokens", 0) / steps
    return walls, stats


def run_raw(
    model: Any, tokenizer: Any, prompts: Callable[[int], list[list[int]]]
) -> tuple[list[float], dict[str, float]]:
    n = len(prompts(0))
    from mlx_lm.generate import BatchGenerator

    eos = sorted(tokenizer.eos_token_ids)
    gen = BatchGenerator(
        model,
        stop_tokens=[[t] for t in eos],
        completion_batch_size=n,
        prefill_batch_size=min(ARGS.prefill_group, n),
    )
    rates: list[float] = []
    step_s, steps = 0.0, 0
    measured = gen.stats()
    inside = None
    for r in range(ARGS.rounds + 1):
        if r == 1:
            inside = measured.__enter__()
        start = time.perf_counter()
        live = set(gen.insert(prompts(r), max_tokens=[ARGS.tokens] * n))
        tokens = 0
        while live:
            t = time.perf_counter()
            out = gen.next_generated()
            if r > 0:
                step_s += time.perf_counter() - t
                steps += 1
            for resp in out:
                if resp.finish_reason != "stop":
                    tokens += 1
                if resp.finish_reason is not None:
                    live.discard(resp.uid)
        if r > 0:
            rates.append(tokens / (time.perf_counter() - start))
    measured.__exit__(None, None, None)
    gen.close()
    assert inside is not None
    return rates, {
        "step_ms": 1000 * step_s / max(steps, 1),
        "bg_prompt_s": inside.prompt_time,
        "bg_prompt_tokens": inside.prompt_tokens,
        "bg_decode_s": inside.decode_time,
        "bg_decode_steps": inside.generation_steps,
    }


def main() -> None:
    from mlx_lm import load

    model, tokenizer = load(ARGS.model)[:2]

    def text(r: int, i: int) -> str:
        if ARGS.prompts == "distinct":  # as bench/concurrency.py: only the template is shared
            return f"Request {r}.{i}: write a short story about {TOPICS[i % 8]}."
        return f"Story {i}: {TOPICS[i % 8]}"

    made: dict[int, list[list[int]]] = {}

    def prompts(r: int) -> list[list[int]]:
        if r not in made:
            made[r] = [
                chat_ids(tokenizer, [{"role": "user", "content": text(r, i)}])
                for i in range(ARGS.streams)
            ]
            if ARGS.prompts != "distinct":  # rounds differ in the last token only
                made[r] = [[*p[:-1], p[-1] + r % 3] for p in made[r]]
        return made[r]

    runs = {
        "raw BatchGenerator": lambda: run_raw(model, tokenizer, prompts),
        "scheduler, at once": lambda: run_scheduler(model, tokenizer, prompts, 10**9, 64),
    }
    for n in ARGS.arrive:
        runs[f"scheduler, {n}/step"] = lambda n=n: run_scheduler(model, tokenizer, prompts, n, 64)
        runs[f"scheduler, {n}/step, not gathered"] = lambda n=n: run_scheduler(
            model, tokenizer, prompts, n, 64, gather_s=0.0
        )
    n = ARGS.arrive[-1]
    runs[f"scheduler, {n}/step, no prefix cache"] = lambda: run_scheduler(
        model, tokenizer, prompts, n, 0
    )
    results: dict[str, Any] = {}
    for name, fn in runs.items():
        rates, stats = fn()
        results[name] = {"tok_s": statistics.median(rates), "rates": rates, "stats": stats}
        print(
            f"{name:45s} {statistics.median(rates):9.1f} tok/s  step {stats['step_ms']:.2f} ms"
            f"  rounds {[round(r) for r in rates]}"
            f"  {json.dumps({k: round(v, 3) for k, v in stats.items()})}",
            flush=True,
        )
    raw = results["raw BatchGenerator"]["tok_s"]
    for name, r in results.items():
        print(f"{name:45s} {r['tok_s'] / raw:5.2f}x raw")
    short = {"scheduler, ": "", ", not gathered": "\nungathered", ", no prefix cache": "\nno cache"}

    def label(name: str) -> str:
        for long, brief in short.items():
            name = name.replace(long, brief)
        return name.replace(" BatchGenerator", "")

    ratios = {label(name): r["tok_s"] / raw for name, r in results.items()}
    title = f"{ARGS.streams} streams, {ARGS.tokens} tokens, {ARGS.prompts} prompts"
    write_results(
        "scheduler",
        # The model's name, not its path on this machine.
        {"args": {**vars(ARGS), "model": Path(ARGS.model).name}, "results": results},
        [Bars(title, "tokens/s / raw BatchGenerator", ratios, "{:.2f}")],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--prompts",
        choices=["similar", "distinct"],
        default="similar",
        help="similar: rounds differ in one token (the prefix cache holds most of each prompt);"
        " distinct: a new request number each round, as bench/concurrency.py",
    )
    parser.add_argument(
        "--arrive", default="1,8", help="jobs handed over per step (comma-separated runs)"
    )
    parser.add_argument(
        "--prefill-group",
        type=int,
        default=None,
        help="prompts prefilled together, raw and scheduler alike (default: the engine's own)",
    )
    ARGS = parser.parse_args()
    ARGS.arrive = [int(n) for n in ARGS.arrive.split(",")]
    if ARGS.prefill_group is None:
        from omni.runtime.worker import prefill_group
        from omni.settings import engine_knobs

        ARGS.prefill_group = prefill_group(engine_knobs()["prefill_group"])
    if ARGS.model is None:  # a quick check of the script itself: a tiny random llama
        import tempfile

        from omni.runtime.tiny import build_tiny_llama

        ARGS.model = str(build_tiny_llama(Path(tempfile.mkdtemp()) / "tiny-llama"))
    main()
