"""Under load: a long prompt arrives while streams decode. Do the running streams keep getting
tokens, and how late is the long prompt's first token?

    python bench/longprompt.py [--model PATH_OR_ID] [--streams 8] [--prompt-tokens 2000]
                               [--rounds 3] [--warmup-rounds 1] [--tokens 4096]
                               [--long-tokens 16] [--chunk N] [--after 20]

--model: as `omni serve` takes it (default: the default model, under OMNI_HOME), or a tiny
random llama's folder (omni.testing.llama.build_tiny_llama(path, layers=4, hidden=256): a
2,000-token prefill takes seconds on a CPU, and its 2,048-token context still fits one).
Through `omni serve` (a subprocess on a temp db), streamed chat completions, greedy. Each round
runs two arms, their order turning from round to round:
- alone: a long prompt of --prompt-tokens tokens (through the chat template) is sent to an idle
  server; its time to first token is `prefill_alone`.
- under load: --streams streams start (max_tokens --tokens, long enough to outlast the round);
  once each has received 8 tokens, a long prompt of the same length arrives. The window runs
  from its arrival to its first token plus --after of the streams' median gaps before it
  came; then every request is closed (the server cancels them) and the next arm waits for an
  idle engine.
Every prompt is new: a nonce of the run, the round and the arm opens it, so no two share more
than the chat template, and the prefix cache cannot help one from another.
Gaps are measured in the client, from each content chunk's arrival. The requests ask for
logprobs, so each chunk says how many tokens it carries: the detokenizer holds a token whose
text is half a character (or a lone space) and sends it with the next, which a random model
does often. The engine makes a stream's tokens one a step, so a chunk of k tokens after a gap g
counts as k gaps of g/k: median_gap, p99_gap and max_gap are over those per-token gaps (the
target's); p99_chunk_gap and max_chunk_gap over the chunks' own gaps, the longest a client waited
for text, a held token included (where each chunk carries one token, both are the same).
Targets (bench/README.md; issue 21), per round and on the medians over rounds:
- p99_gap <= 3 * median_gap + chunk_time, over the window; chunk_time = prefill_alone /
  ceil(prompt_tokens / --chunk), the time one prefill chunk takes;
- ttft_under_load <= 1.5 * prefill_alone.
--chunk defaults to the engine's prefill chunk on this device
(omni.runtime.chat.worker.prefill_chunk, OMNI_PREFILL_CHUNK in BENCH_OMNI_ENV or the
environment sets it).
The engine's step trace (OMNI_ENGINE_TRACE) is written for the run: each round reports the
longest engine step in its window, with the prompt tokens it prefilled.
Writes bench/out/longprompt.json: every round's raw arrivals and figures, and the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402
from _server import bench_omni_env, chat_body, chat_ids, start_omni  # noqa: E402
from concurrency import NO_CACHE, TOPICS, percentile, stop  # noqa: E402

from omni.runtime.chat.observe import TRACE_FIELDS  # noqa: E402

WARM_TOKENS = 8  # tokens each stream has before the long prompt is sent
WORDS = (
    "river stone light window garden paper market winter morning letter engine silver "
    "harbor forest candle mirror bridge signal orange thunder pocket meadow violin lantern "
    "copper shadow ladder velvet compass island basket feather marble rocket spiral canyon "
    "pepper saddle tunnel walnut blanket glacier hammer quartz falcon orchard pillow beacon"
).split()


@dataclass
class Stream:
    """One request's chunks: (arrival on perf_counter's clock, tokens it carries)."""

    sent: float = 0.0
    chunks: list[tuple[float, int]] = field(default_factory=list)
    ended: bool = False  # finished by the server before the window closed

    @property
    def tokens(self) -> int:
        return sum(k for _, k in self.chunks)

    @property
    def first(self) -> float | None:
        return self.chunks[0][0] if self.chunks else None


async def follow(client: httpx.AsyncClient, body: dict[str, Any], into: Stream) -> None:
    into.sent = time.perf_counter()
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=NO_CACHE) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            # One logprobs entry per token (no top_logprobs asked): counted, not parsed, so
            # the client's own work stays small beside the gaps it measures.
            if k := line.count('"logprob":'):
                into.chunks.append((time.perf_counter(), k))
    into.ended = True


def long_prompt(tokenizer: Any, n: int, tag: str) -> tuple[str, int]:
    """A user message of `tag`, sentences in a random order and a request to retell them that
    renders to `n` prompt tokens (or close: its text and its prompt's tokens). Sentences, not
    random words: fed 2,000 random words, SmolLM2 ends its answer at once."""
    rng = random.Random(tag)
    story = " ".join(
        f"The {rng.choice(WORDS)} and the {rng.choice(WORDS)} met by the {rng.choice(WORDS)}."
        for _ in range(n // 8 + 1)
    )
    words = tokenizer.encode(story, add_special_tokens=False)
    head, tail = f"{tag}: here is a story.\n", "\nRetell this story in your own words."
    keep, got = n, 0
    text = head
    for _ in range(6):  # decoding and encoding again may merge tokens: adjust, try again
        text = head + tokenizer.decode(words[: max(0, keep)]) + tail
        got = len(chat_ids(tokenizer, [{"role": "user", "content": text}]))
        if got == n:
            break
        keep += n - got
    return text, got


def body(model: str, text: str, max_tokens: int) -> dict[str, Any]:
    return {**chat_body(model, text, max_tokens), "logprobs": True}


async def wait_idle(client: httpx.AsyncClient, limit_s: float = 300) -> None:
    """Until the server's engine has no job running or queued (the last arm's were closed)."""
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        metrics = (await client.get("/metrics")).text
        busy = [
            line
            for line in metrics.splitlines()
            if line.startswith(("omni_jobs_running", "omni_jobs_queued"))
        ]
        if busy and all(float(line.split()[-1]) == 0 for line in busy):
            return
        await asyncio.sleep(0.2)
    raise SystemExit(f"the engine was still busy {limit_s:.0f} s after the arm's requests closed")


async def alone(client: httpx.AsyncClient, model: str, text: str) -> dict[str, Any]:
    long = Stream()
    task = asyncio.create_task(follow(client, body(model, text, ARGS.long_tokens), long))
    while long.first is None and not task.done():
        await asyncio.sleep(0.005)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    if long.first is None:
        raise SystemExit("the long prompt alone got no token")
    return {"prefill_alone_s": long.first - long.sent}


async def under_load(client: httpx.AsyncClient, model: str, text: str, tag: str) -> dict[str, Any]:
    streams = [Stream() for _ in range(ARGS.streams)]
    prompts = [
        f"{tag}-s{i}: write a very long story about {TOPICS[i % len(TOPICS)]}, chapter by chapter."
        for i in range(ARGS.streams)
    ]
    tasks = [
        asyncio.create_task(follow(client, body(model, p, ARGS.tokens), s))
        for p, s in zip(prompts, streams, strict=True)
    ]
    while min(s.tokens for s in streams) < WARM_TOKENS:
        if any(t.done() for t in tasks):
            await asyncio.gather(*tasks)  # a failure's own error
            raise SystemExit("a stream ended before the long prompt was sent: raise --tokens")
        await asyncio.sleep(0.005)
    long = Stream()
    tasks.append(asyncio.create_task(follow(client, body(model, text, ARGS.long_tokens), long)))
    while long.first is None and not tasks[-1].done():
        await asyncio.sleep(0.005)
    if long.first is None:
        await asyncio.gather(tasks[-1])
        raise SystemExit("the long prompt under load got no token")
    arrival = long.sent
    before = [g for s in streams for g in gaps(s, float("-inf"), arrival)]
    after = ARGS.after * statistics.median(g for g, _ in before)
    await asyncio.sleep(after)
    end = time.perf_counter()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    window = [g for s in streams for g in gaps(s, arrival, end)]
    return {
        "ttft_under_load_s": long.first - arrival,
        "after_s": after,
        "window_s": end - arrival,
        "before": figures(before),
        "window": figures(window),
        "overall": figures([g for s in streams for g in gaps(s, float("-inf"), end)]),
        "streams_ended_early": sum(s.ended for s in streams),
        # Raw arrivals, on a clock whose zero is the long prompt's arrival.
        "arrival": arrival,
        "long_first_s": long.first - arrival,
        "streams": [
            {
                "sent_s": s.sent - arrival,
                "chunks": [(round(t - arrival, 6), k) for t, k in s.chunks],
            }
            for s in streams
        ],
    }


def gaps(s: Stream, start: float, end: float) -> list[tuple[float, int]]:
    """(gap, tokens) of each of a stream's chunks after its first that arrived in (start, end]."""
    pairs = zip(s.chunks, s.chunks[1:], strict=False)
    return [(t - prev, k) for (prev, _), (t, k) in pairs if start < t <= end]


def figures(pairs: list[tuple[float, int]]) -> dict[str, float]:
    """The gaps between a stream's tokens: the engine makes one a step, and a chunk of k tokens
    after a gap g stands for k steps of g / k (the detokenizer held k - 1 of them back: half
    a character, a lone space). The chunks' own gaps (what a client waited for text) too."""
    per_token = [g / k for g, k in pairs for _ in range(k)]
    chunk = [g for g, _ in pairs]
    return {
        "median_gap_s": statistics.median(per_token),
        "p99_gap_s": percentile(per_token, 0.99),
        "max_gap_s": max(per_token),
        "p99_chunk_gap_s": percentile(chunk, 0.99),
        "max_chunk_gap_s": max(chunk),
        "chunks": len(chunk),
        "tokens": len(per_token),
    }


def targets(prefill_alone: float, load: dict[str, Any], prompt_tokens: int) -> dict[str, Any]:
    chunk_time = prefill_alone / math.ceil(prompt_tokens / ARGS.chunk)
    w = load["window"]
    gap_bound = 3 * w["median_gap_s"] + chunk_time
    ttft_bound = 1.5 * prefill_alone
    return {
        "chunk_time_s": chunk_time,
        "gap_bound_s": gap_bound,
        "gap_pass": w["p99_gap_s"] <= gap_bound,
        "ttft_bound_s": ttft_bound,
        "ttft_ratio": load["ttft_under_load_s"] / prefill_alone,
        "ttft_pass": load["ttft_under_load_s"] <= ttft_bound,
    }


def longest_steps(trace: Path, rounds: list[dict[str, Any]]) -> None:
    """Each round's longest engine step in its window, from the engine's step trace."""
    if not trace.exists():
        print("no engine trace came back (did the server stop cleanly?)", file=sys.stderr)
        return
    rows = [dict(zip(TRACE_FIELDS, r, strict=True)) for r in json.loads(trace.read_text())["rows"]]
    for rnd in rounds:
        load = rnd["under_load"]
        start, end = load["arrival"], load["arrival"] + load["window_s"]
        inside = [r for r in rows if start < r["t"] <= end + 1e-3]
        if inside:
            rnd["longest_step"] = max(inside, key=lambda r: r["step_s"])
            rnd["window_steps"] = len(inside)
            rnd["window_prefill_steps"] = [r for r in inside if r["prefill_tokens"]]


async def run(base: str, tokenizer: Any, nonce: str) -> list[dict[str, Any]]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=base, timeout=ARGS.timeout, limits=limits) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        rounds = []
        for r in range(-ARGS.warmup_rounds, ARGS.rounds):
            arms: dict[str, Any] = {}
            order = ("alone", "under_load") if r % 2 == 0 else ("under_load", "alone")
            for arm in order:
                tag = f"{nonce}-{r}-{arm}"
                text, tokens = long_prompt(tokenizer, ARGS.prompt_tokens, tag)
                if arm == "alone":
                    arms[arm] = await alone(client, model, text)
                else:
                    arms[arm] = await under_load(client, model, text, tag)
                arms[arm]["prompt_tokens"] = tokens
                await wait_idle(client)
            if r < 0:
                print(f"warm-up round {r}: done", file=sys.stderr)
                continue
            prefill = arms["alone"]["prefill_alone_s"]
            rounds.append(
                {
                    "order": order,
                    **arms,
                    "targets": targets(prefill, arms["under_load"], ARGS.prompt_tokens),
                }
            )
            print(row(f"#{len(rounds)}", flat(rounds[-1])), file=sys.stderr, flush=True)
    return rounds


def ms(s: float) -> str:
    return f"{s * 1000:,.0f}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


HEADER = (
    f"{'round':>6} | {'alone ms':>9} {'load ms':>9} {'ratio':>6} | {'median':>6} {'p99':>7} "
    f"{'max':>7} {'bound':>7} {'chunk p99':>9} | {'longest step ms (prefill)':>25} | "
    "targets: gaps, TTFT"
)


def row(label: str, f: dict[str, Any], step: dict[str, float] | None = None) -> str:
    """One line of the table; `f`: a round's figures, flattened as the summary's."""
    longest = f"{ms(step['step_s'])} ({step['prefill_tokens']:.0f})" if step else "-"
    return (
        f"{label:>6} | {ms(f['prefill_alone_s']):>9} {ms(f['ttft_under_load_s']):>9} "
        f"{f['ttft_ratio']:>6.2f} | {ms(f['window_median_gap_s']):>6} "
        f"{ms(f['window_p99_gap_s']):>7} {ms(f['window_max_gap_s']):>7} "
        f"{ms(f['gap_bound_s']):>7} {ms(f['window_p99_chunk_gap_s']):>9} | {longest:>25} | "
        f"{verdict(f['gap_pass'])}, {verdict(f['ttft_pass'])}"
    )


def flat(rnd: dict[str, Any]) -> dict[str, Any]:
    """A round's figures under the summary's names."""
    load = rnd["under_load"]
    spans = {
        f"{span}_{name}": load[span][name]
        for span in ("before", "window", "overall")
        for name in ("median_gap_s", "p99_gap_s", "max_gap_s", "p99_chunk_gap_s", "max_chunk_gap_s")
    }
    t = rnd["targets"]
    return {
        "prefill_alone_s": rnd["alone"]["prefill_alone_s"],
        "ttft_under_load_s": load["ttft_under_load_s"],
        **spans,
        **{k: t[k] for k in ("ttft_ratio", "chunk_time_s", "gap_bound_s", "gap_pass", "ttft_pass")},
    }


def main() -> None:
    from mlx_lm.utils import load_tokenizer

    from omni.cli.options import omni_home
    from omni.runtime.loading.source import resolve_model

    source = resolve_model(ARGS.model, omni_home(), lambda m: print(m, file=sys.stderr))
    tokenizer = load_tokenizer(Path(source.path))
    nonce = secrets.token_hex(3)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "engine_trace.json"
        proc, base = start_omni(
            source.path,
            Path(tmp) / "bench.db",
            *("--max-batch-size", str(max(32, ARGS.streams + 1))),
            env={"OMNI_ENGINE_TRACE": str(trace)},
        )
        try:
            rounds = asyncio.run(run(base, tokenizer, nonce))
        finally:
            stop(proc)
        longest_steps(trace, rounds)
    write(source.model_id, rounds, report(source.model_id, rounds))


def report(model_id: str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Prints every round and the medians over rounds; returns the summary."""
    each = [flat(r) for r in rounds]
    numbers = [k for k, v in each[0].items() if not isinstance(v, bool)]
    summary: dict[str, Any] = {k: statistics.median(f[k] for f in each) for k in numbers}
    summary["gap_bound_s"] = 3 * summary["window_median_gap_s"] + summary["chunk_time_s"]
    summary["gap_pass"] = summary["window_p99_gap_s"] <= summary["gap_bound_s"]
    summary["ttft_pass"] = summary["ttft_under_load_s"] <= 1.5 * summary["prefill_alone_s"]
    print(
        f"model {model_id}, {ARGS.streams} streams, long prompt {ARGS.prompt_tokens} tokens, "
        f"chunk {ARGS.chunk}, {len(rounds)} rounds, arms alternating. alone / load: the long "
        "prompt's time to first token; ratio: load / alone; median, p99, max: the streams' "
        "gaps in the window (ms); bound: 3 * median + chunk_time"
    )
    print(HEADER)
    for i, (r, f) in enumerate(zip(rounds, each, strict=True)):
        print(row(str(i + 1), f, r.get("longest_step")))
    print(row("median", summary))
    print(f"p99_gap <= 3*median_gap + chunk_time: {verdict(summary['gap_pass'])}")
    print(f"ttft_under_load <= 1.5*prefill_alone: {verdict(summary['ttft_pass'])}")
    return summary


def write(model_id: str, rounds: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    result = {
        "model": model_id,
        "streams": ARGS.streams,
        "prompt_tokens": ARGS.prompt_tokens,
        "chunk": ARGS.chunk,
        "stream_max_tokens": ARGS.tokens,
        "long_max_tokens": ARGS.long_tokens,
        "after_gaps": ARGS.after,
        "warmup_rounds": ARGS.warmup_rounds,
        "summary": summary,
        "rounds": rounds,
    }
    write_results("longprompt", result)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: SmolLM2)")
    p.add_argument("--streams", type=int, default=8, help="streams decoding when it arrives")
    p.add_argument("--prompt-tokens", type=int, default=2000, help="the long prompt's tokens")
    p.add_argument("--rounds", type=int, default=3, help="measured rounds, both arms each")
    p.add_argument("--warmup-rounds", type=int, default=1, help="unmeasured rounds first")
    p.add_argument(
        "--tokens", type=int, default=4096, help="the streams' max_tokens (the context caps it)"
    )
    p.add_argument("--long-tokens", type=int, default=16, help="the long prompt's max_tokens")
    p.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="the engine's prefill chunk, for chunk_time (default: the engine's on this device)",
    )
    p.add_argument(
        "--after",
        type=float,
        default=20,
        help="the window's tail past the long prompt's first token, in median gaps",
    )
    p.add_argument("--timeout", type=float, default=1800, help="seconds a request may take")
    ARGS = p.parse_args()
    if ARGS.chunk is None:  # the engine's, in the environment start_omni gives it
        from omni.runtime.chat.worker import prefill_chunk
        from omni.settings import engine_knobs

        knobs = engine_knobs({**os.environ, **bench_omni_env()})
        ARGS.chunk = prefill_chunk(knobs["prefill_chunk"])
    main()
