"""Multi-turn conversations: time to first token per turn, the prefix cache reused and not.

As the history grows, with the prefix (KV) cache reused and not.

    python bench/multiturn.py [--model PATH_OR_ID] [--turns 10] [--tokens-per-turn 200]
                              [--max-output-tokens 8]

Each turn adds a user message of about --tokens-per-turn tokens (by the model's tokenizer), so
turn 10 carries ~2,000 tokens of history. Two ways of carrying the history:
  prev_id: `previous_response_id` (the server holds the history; store true);
  resend:  Codex style, `input` = the whole history as message items each turn, store false.
Each runs against `omni serve` with prefix reuse on (the default server) and off
(`--prompt-cache-entries 0`), a subprocess on a temp db, one server at a time. Every request is
a streamed /v1/responses, temperature 0; TTFT = request sent -> first output_text.delta, and
cached_tokens comes from usage.input_tokens_details. Both modes use their own texts, so a
conversation can only reuse its own prefixes (and the chat template's system prefix).
Raw baseline: mlx_lm.stream_generate's TTFT on the last turn's prompt, cold (no KV cache;
the model warmed up), in-process after the servers stopped.
Prints a table per turn, the last-turn ratio TTFT with reuse / without (target <= 0.25), and
writes bench/out/multiturn.json and bench/out/multiturn.png.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Lines, write_results  # noqa: E402
from _server import chat_ids, start_omni  # noqa: E402

TARGET = 0.25
MODES = ("prev_id", "resend")
WORDS = (
    "river mountain lantern harbor window garden morning letter engine market violin winter "
    "station library meadow compass thunder orchard kitchen bridge island signal canvas marble "
    "feather journey ladder silver forest pocket candle meadow village whistle shadow anchor"
).split()


# --- the conversation's texts -----------------------------------------------------------


def user_texts(tokenizer: Any, mode: str) -> list[str]:
    """--turns user messages of about --tokens-per-turn tokens each, distinct per mode."""
    rng = random.Random(mode)
    texts = []
    for turn in range(1, ARGS.turns + 1):
        text = f"Conversation {mode}, turn {turn}. Please remember these notes:"
        words = 0
        while len(tokenizer.encode(text)) < ARGS.tokens_per_turn:
            words += 1
            text += (" " if words % 8 else ". ") + rng.choice(WORDS)
        texts.append(text)
    return texts


# --- server -----------------------------------------------------------------------------


def streamed(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed /v1/responses call: TTFT, usage and the answer's text."""
    start = time.perf_counter()
    first = 0.0
    parts: list[str] = []
    final: dict[str, Any] = {}
    with client.stream("POST", "/v1/responses", json={**body, "stream": True}) as resp:
        if resp.status_code != 200:
            resp.read()
            raise SystemExit(f"/v1/responses answered {resp.status_code}: {resp.text}")
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "response.output_text.delta":
                first = first or time.perf_counter()
                parts.append(event["delta"])
            elif event["type"] in ("response.completed", "response.incomplete"):
                first = first or time.perf_counter()  # no text at all: the end is the first
                final = event["response"]
            elif event["type"] in ("response.failed", "error"):
                raise SystemExit(f"the response failed: {line}")
    usage = final["usage"]
    return {
        "id": final["id"],
        "ttft_ms": (first - start) * 1000,
        "input_tokens": usage["input_tokens"],
        "cached_tokens": usage["input_tokens_details"]["cached_tokens"],
        "output_tokens": usage["output_tokens"],
        "text": "".join(parts),
    }


def conversation(client: httpx.Client, model_id: str, mode: str, texts: list[str]) -> list[dict]:
    base = {"model": model_id, "temperature": 0, "max_output_tokens": ARGS.max_output_tokens}
    turns: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []  # resend: every message so far, as Codex sends them
    for text in texts:
        if mode == "prev_id":
            body = {**base, "input": text}
            if turns:
                body["previous_response_id"] = turns[-1]["id"]
        else:
            history.append(
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                }
            )
            body = {**base, "input": history, "store": False}
        turn = streamed(client, body)
        if mode == "resend":
            history.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": turn["text"]}],
                }
            )
        turns.append(turn)
        print(
            f"  {mode} turn {len(turns)}: {turn['input_tokens']} input tokens, "
            f"{turn['cached_tokens']} cached, TTFT {turn['ttft_ms']:.1f} ms",
            file=sys.stderr,
        )
    return turns


def server_runs(model_path: str, tmp: Path, reuse: bool, texts: dict[str, list[str]]) -> dict:
    flags = () if reuse else ("--prompt-cache-entries", "0")
    server, base_url = start_omni(model_path, tmp / f"reuse-{reuse}.db", *flags)
    try:
        with httpx.Client(base_url=base_url, timeout=600) as client:
            model_id = client.get("/v1/models").json()["data"][0]["id"]
            warm = {"model": model_id, "input": "Say hello.", "temperature": 0}
            streamed(client, {**warm, "max_output_tokens": 4})
            return {mode: conversation(client, model_id, mode, texts[mode]) for mode in MODES}
    finally:
        server.terminate()
        server.wait(timeout=60)


# --- raw mlx-lm -------------------------------------------------------------------------


def raw_cold_ttft(model: Any, tokenizer: Any, messages: list[dict[str, str]]) -> dict[str, Any]:
    from mlx_lm import stream_generate
    from mlx_lm.sample_utils import make_sampler

    def encode(msgs: list[dict[str, str]]) -> list[int]:
        return chat_ids(tokenizer, msgs)

    def ttft(prompt: list[int]) -> float:
        start = time.perf_counter()
        for _ in stream_generate(
            model, tokenizer, prompt, max_tokens=1, sampler=make_sampler(temp=0.0)
        ):
            break
        return (time.perf_counter() - start) * 1000

    ttft(encode([{"role": "user", "content": "Say hello."}]))  # warm-up
    prompt = encode(messages)
    runs = [ttft(prompt) for _ in range(3)]
    return {"prompt_tokens": len(prompt), "ttft_ms": statistics.median(runs), "runs_ms": runs}


# --- report -----------------------------------------------------------------------------


def main() -> None:
    from mlx_lm import load
    from mlx_lm.utils import load_tokenizer

    from omni.cli.options import omni_home
    from omni.runtime.loading.source import resolve_model

    source = resolve_model(ARGS.model, omni_home(), lambda m: print(m, file=sys.stderr))
    tokenizer = load_tokenizer(Path(source.path))
    texts = {mode: user_texts(tokenizer, mode) for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        on = server_runs(source.path, Path(tmp), True, texts)
        off = server_runs(source.path, Path(tmp), False, texts)

    # The last turn's prompt as the resend conversation (reuse on) sent it.
    messages: list[dict[str, str]] = []
    for text, turn in zip(texts["resend"], on["resend"], strict=True):
        messages += [
            {"role": "user", "content": text},
            {"role": "assistant", "content": turn["text"]},
        ]
    messages.pop()  # the last answer is what the prompt asks for
    model, raw_tokenizer = load(source.path)[:2]
    raw = raw_cold_ttft(model, raw_tokenizer, messages)

    configs = {
        "prev_id + reuse": on["prev_id"],
        "prev_id, no reuse": off["prev_id"],
        "resend + reuse": on["resend"],
        "resend, no reuse": off["resend"],
    }
    last = ARGS.turns - 1
    ratios = {mode: on[mode][last]["ttft_ms"] / off[mode][last]["ttft_ms"] for mode in MODES}
    off_cached = sum(t["cached_tokens"] for mode in MODES for t in off[mode])
    result = {
        "model": source.model_id,
        "turns": ARGS.turns,
        "tokens_per_turn": ARGS.tokens_per_turn,
        "max_output_tokens": ARGS.max_output_tokens,
        "runs": configs,
        "raw_stream_generate_last_turn_cold": raw,
        "ratio_last_turn_ttft_reuse_over_no_reuse": ratios,
        "ratio_last_turn_ttft_no_reuse_over_raw": {
            mode: off[mode][last]["ttft_ms"] / raw["ttft_ms"] for mode in MODES
        },
        "target_ratio": TARGET,
        "cached_tokens_with_prompt_cache_entries_0": off_cached,
    }

    print(
        f"model {source.model_id}, {ARGS.turns} turns of ~{ARGS.tokens_per_turn} user tokens, "
        f"streamed /v1/responses, greedy, max_output_tokens {ARGS.max_output_tokens}"
    )
    print(f"{'':>5}{'input tokens':>16} | " + " | ".join(f"{name:^18}" for name in configs))
    header = " | ".join(f"{'TTFT ms':>9}{'cached':>9}" for _ in configs)
    print(f"{'turn':>5}{'prev_id':>8}{'resend':>8} | {header}")
    for i in range(ARGS.turns):
        cells = [f"{c[i]['ttft_ms']:>9.1f}{c[i]['cached_tokens']:>9}" for c in configs.values()]
        inputs = f"{on['prev_id'][i]['input_tokens']:>8}{on['resend'][i]['input_tokens']:>8}"
        print(f"{i + 1:>5}{inputs} | " + " | ".join(cells))
    print(
        f"raw mlx_lm.stream_generate, turn-{ARGS.turns} prompt cold "
        f"({raw['prompt_tokens']} tokens): TTFT {raw['ttft_ms']:.1f} ms"
    )
    for mode in MODES:
        verdict = "met" if ratios[mode] <= TARGET else "NOT met"
        print(
            f"turn {ARGS.turns} TTFT with reuse / without, {mode}: {ratios[mode]:.3f} "
            f"(target <= {TARGET}: {verdict}); without reuse / raw cold: "
            f"{result['ratio_last_turn_ttft_no_reuse_over_raw'][mode]:.3f}"
        )
    if off_cached:
        print(f"WARNING: {off_cached} cached tokens reported with --prompt-cache-entries 0")
    turns = list(range(1, ARGS.turns + 1))
    write_results(
        "multiturn",
        result,
        [
            Lines(
                "time to first token per turn",
                "turn",
                "ms",
                {name: (turns, [t["ttft_ms"] for t in c]) for name, c in configs.items()},
                hlines={f"raw mlx-lm, turn {ARGS.turns} cold": raw["ttft_ms"]},
            ),
            Lines(
                "cached (reused) prompt tokens per turn",
                "turn",
                "tokens",
                {
                    **{
                        name: (turns, [t["cached_tokens"] for t in c])
                        for name, c in configs.items()
                    },
                    "input tokens (resend)": (turns, [t["input_tokens"] for t in on["resend"]]),
                },
            ),
        ],
        f"multi-turn prefix reuse: {source.model_id}, ~{ARGS.tokens_per_turn} tokens per turn",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: SmolLM2)")
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--tokens-per-turn", type=int, default=200, help="user tokens added per turn")
    p.add_argument("--max-output-tokens", type=int, default=8)
    ARGS = p.parse_args()
    main()
