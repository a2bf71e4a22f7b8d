"""What a step in which jobs finish costs in mlx-lm's BatchGenerator, in-process (no HTTP, no
server): N prompts at once, greedy, all finishing by length, so groups prefilled together finish
together. Each finishing step is timed beside its parts: BatchGenerator taking the finished rows
out of its batched KV cache (`GenerationBatch.filter`), cutting each finished job's cache out
(`extract_cache`), and, in the `keep` arm, Omni's engine keeping those caches for prefix reuse
(`omni.runtime.generation.PrefixCache.insert`, as `omni.runtime.batching` does); the `raw` arm
drops them, as bench/concurrency.py's raw BatchGenerator does.

    python bench/finish.py [--model PATH] [--streams 64] [--tokens 128] [--rounds 3]
                           [--prefill-group G] [--cache-entries 16]

One unmeasured warm-up round, then --rounds rounds of each arm, alternating. Prints, per arm, the
median full-batch decode step and, per finishing step (each round's median, then the median over
rounds): its time, filter, extract and keep, the step after it, and the round's time beyond its
steps x its own median step (prefill and finishing steps); writes bench/out/finish.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _plot import write_results  # noqa: E402
from _server import chat_ids  # noqa: E402
from concurrency import prompt_text  # noqa: E402

ARMS = ("raw", "keep")


class Timed:
    """Seconds spent in two of GenerationBatch's methods since the last `take`, while in use
    (`with Timed() as timed:`; the methods are put back after)."""

    METHODS = {"filter": "filter", "extract": "extract_cache"}

    def __init__(self) -> None:
        self.spent = dict.fromkeys(self.METHODS, 0.0)
        self._originals: dict[str, Any] = {}

    def __enter__(self) -> Timed:
        from mlx_lm.generate import GenerationBatch

        for name, method in self.METHODS.items():
            original = self._originals[method] = getattr(GenerationBatch, method)

            def timed(*args: Any, _f: Any = original, _name: str = name, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return _f(*args, **kwargs)
                finally:
                    self.spent[_name] += time.perf_counter() - start

            setattr(GenerationBatch, method, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        from mlx_lm.generate import GenerationBatch

        for method, original in self._originals.items():
            setattr(GenerationBatch, method, original)

    def take(self) -> dict[str, float]:
        spent, self.spent = self.spent, dict.fromkeys(self.spent, 0.0)
        return spent


def one_round(model: Any, tokenizer: Any, arm: str, rnd: int, timed: Timed) -> dict[str, Any]:
    from mlx_lm.generate import BatchGenerator

    from omni.runtime.generation import PrefixCache

    eos = sorted(tokenizer.eos_token_ids)
    gen = BatchGenerator(
        model,
        stop_tokens=[[t] for t in eos],
        completion_batch_size=ARGS.streams,
        prefill_batch_size=min(ARGS.prefill_group, ARGS.streams),
    )
    kept = PrefixCache(model, entries=ARGS.cache_entries, nbytes=1 << 40)
    prompts = [
        chat_ids(tokenizer, [{"role": "user", "content": prompt_text(ARGS.streams, rnd, i)}])
        for i in range(ARGS.streams)
    ]
    uids = gen.insert(prompts, [ARGS.tokens] * len(prompts))
    held = dict(zip(uids, prompts, strict=True))
    made: dict[int, list[int]] = {uid: [] for uid in held}
    steps: list[dict[str, Any]] = []
    live = len(prompts)
    start = time.perf_counter()
    timed.take()
    while live:
        mark = time.perf_counter()
        out = gen.next_generated()
        step_s = time.perf_counter() - mark
        spent = timed.take()
        ended = [r for r in out if r.finish_reason is not None]
        mark = time.perf_counter()
        for r in out:
            made[r.uid].append(int(r.token))
        if arm == "keep":
            for r in ended:
                kept.insert("", held[r.uid] + made[r.uid], r.prompt_cache)
        keep_s = time.perf_counter() - mark if arm == "keep" else 0.0
        live -= len(ended)
        steps.append(
            {"s": step_s, "batch": len(out), "ended": len(ended), "keep_s": keep_s, **spent}
        )
    wall = time.perf_counter() - start
    gen.close()
    return {"wall_s": wall, "steps": steps}


def full_step(steps: list[dict[str, Any]]) -> float:
    """The median step with the whole batch decoding (no prefill, nobody finishing)."""
    return statistics.median(s["s"] for s in steps if s["batch"] == ARGS.streams and not s["ended"])


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure a median over rounds of that round's own median: a host's decode speed can
    move between rounds, and a round is measured against its own full-batch step."""
    medians = [full_step(r["steps"]) for r in rounds]
    keys = ("ended", "step_ms", "filter_ms", "extract_ms", "keep_ms", "next_ms")
    per_round: dict[str, list[float]] = {key: [] for key in keys}
    for r in rounds:
        steps = r["steps"]
        at = [i for i, s in enumerate(steps) if s["ended"]]
        figures = {
            "ended": [steps[i]["ended"] for i in at],
            "step_ms": [steps[i]["s"] * 1000 for i in at],
            "filter_ms": [steps[i]["filter"] * 1000 for i in at],
            "extract_ms": [steps[i]["extract"] * 1000 for i in at],
            "keep_ms": [steps[i]["keep_s"] * 1000 for i in at],
            # The round's last finishing step has none after it.
            "next_ms": [steps[i + 1]["s"] * 1000 for i in at if i + 1 < len(steps)],
        }
        for key, values in figures.items():
            if values:
                per_round[key].append(statistics.median(values))
    beyond = [  # ms beyond steps x the round's median step
        (r["wall_s"] - len(r["steps"]) * m) * 1000 for r, m in zip(rounds, medians, strict=True)
    ]
    return {
        "median_step_ms": statistics.median(medians) * 1000,
        "finishing_steps_a_round": statistics.median(
            sum(1 for s in r["steps"] if s["ended"]) for r in rounds
        ),
        "per_finishing_step": {
            # None: no such step (a round that finished all at once has no step after it)
            key: statistics.median(v) if v else None
            for key, v in per_round.items()
        },
        "beyond_ms": beyond,
        "wall_s": [r["wall_s"] for r in rounds],
    }


def main() -> None:
    from mlx_lm import load

    model, tokenizer = load(ARGS.model)[:2]
    rounds: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    with Timed() as timed:
        one_round(model, tokenizer, "keep", 0, timed)  # warm-up: kernels for every batch shape
        for rnd in range(1, ARGS.rounds + 1):
            for arm in ARMS:
                rounds[arm].append(one_round(model, tokenizer, arm, rnd, timed))
    result: dict[str, Any] = {
        "model": Path(ARGS.model).name,
        "streams": ARGS.streams,
        "tokens": ARGS.tokens,
        "prefill_group": ARGS.prefill_group,
        "cache_entries": ARGS.cache_entries,
        "rounds": ARGS.rounds,
        "arms": {arm: summary(rs) for arm, rs in rounds.items()},
    }
    print(
        f"model {result['model']}, {ARGS.streams} prompts at once, {ARGS.tokens} tokens, "
        f"prefill group {ARGS.prefill_group}, {ARGS.rounds} rounds an arm (ms, medians)"
    )
    print(
        "arm  | decode step | finishing steps | rows out | step | filter | extract | keep "
        "| next step | beyond steps x median"
    )
    for arm, s in result["arms"].items():
        e = s["per_finishing_step"]
        beyond = statistics.median(s["beyond_ms"])
        print(
            f"{arm:4s} | {s['median_step_ms']:11.2f} | {s['finishing_steps_a_round']:15.0f} | "
            f"{e['ended']:8.0f} | {e['step_ms']:4.1f} | {e['filter_ms']:6.1f} | "
            f"{e['extract_ms']:7.1f} | {e['keep_ms']:4.1f} | {cell(e['next_ms'], 9)} | "
            f"{beyond:8.0f}"
        )
    write_results("finish", result)


def cell(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}.1f}"


def parse() -> argparse.Namespace:
    from omni.runtime.worker import prefill_group
    from omni.settings import engine_knobs

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--model", default=None, help="an mlx-lm model folder (default: a tiny random llama)"
    )
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--cache-entries",
        type=int,
        default=16,
        help="the keep arm's prefix cache entries (omni serve's default, 16): each insert "
        "compares the job's tokens with every entry's",
    )
    p.add_argument(
        "--prefill-group",
        type=int,
        default=prefill_group(engine_knobs()["prefill_group"]),
        help="prompts prefilled together (default: the engine's own on this device)",
    )
    args = p.parse_args()
    if args.model is None:  # a quick check of the script itself
        import tempfile

        from omni.runtime.tiny import build_tiny_llama

        args.model = str(build_tiny_llama(Path(tempfile.mkdtemp()) / "tiny-llama"))
    return args


if __name__ == "__main__":
    ARGS = parse()
    main()
