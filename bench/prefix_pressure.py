"""A coding agent's long prefix in the prefix cache while one-off prompts pass through, at full
size: a Codex-shaped session (~8 k tokens of instructions, a `prompt_cache_key`) and 50 one-off
prompts of ~2 k tokens against a memory tier with room for the session and three of them.

    python bench/prefix_pressure.py [--model PATH_OR_ID] [--session-tokens 8000]
                                    [--one-off-tokens 2000] [--one-offs 50] [--room 3]

The model is a tiny random-weight llama with a 16 k context unless --model names one (its
prefill is what makes a miss cost: the figures here are tokens, not seconds). The session's
first turn, then the 50 one-offs, then: the first one-off asked again (the pressure: its cache
must have left), and the session's second turn (`previous_response_id`): how many of its prompt
tokens came from the cache, and its time to first token against the first turn's (a cold
prefill of nearly the same prompt). The disk tier is off: the memory tier's order alone.
Writes bench/out/prefix_pressure.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402
from _server import model_or_tiny, start_omni  # noqa: E402
from prefix_disk import instructions  # noqa: E402

CONTEXT = 16384


def kv_bytes_per_token(folder: Path) -> int:
    """What one token's KV cache takes, from the model's config (float32 where it says none)."""
    config = json.loads((folder / "config.json").read_text())
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim", config["hidden_size"] // heads)
    size = {"bfloat16": 2, "float16": 2}.get(config.get("torch_dtype", "float32"), 4)
    return config["num_hidden_layers"] * kv_heads * head_dim * 2 * size


def long_context(folder: Path) -> None:
    """Let the tiny llama take a 16 k-token prompt (its weights do not care: rope)."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config["max_position_embeddings"] = CONTEXT
    path.write_text(json.dumps(config, indent=2))


def text_of(http: httpx.Client, model: str, tokens: int) -> str:
    """About `tokens` tokens of text for this model's tokenizer (counted by the server)."""
    sample = instructions(1000)
    r = http.post("/v1/responses/input_tokens", json={"model": model, "input": sample})
    r.raise_for_status()
    return instructions(int(1000 * tokens / r.json()["input_tokens"]))


def ask(http: httpx.Client, model: str, **fields: Any) -> dict[str, Any]:
    """A streamed greedy response of one token: its usage and time to first token."""
    request = {"model": model, "max_output_tokens": 1, "temperature": 0, "stream": True, **fields}
    started = time.perf_counter()
    first, done = None, {}
    with http.stream("POST", "/v1/responses", json=request) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if first is None and event["type"] == "response.output_text.delta":
                first = time.perf_counter() - started
            if event["type"] in ("response.completed", "response.incomplete"):
                done = event["response"]
    usage = done["usage"]
    return {
        "id": done["id"],
        "ttft_s": first if first is not None else time.perf_counter() - started,
        "input_tokens": usage["input_tokens"],
        "cached": (usage.get("input_tokens_details") or {}).get("cached_tokens", 0),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="a model path or id (default: a tiny llama)")
    p.add_argument("--session-tokens", type=int, default=8000)
    p.add_argument("--one-off-tokens", type=int, default=2000)
    p.add_argument("--one-offs", type=int, default=50)
    p.add_argument("--room", type=int, default=3, help="one-off prompts the memory holds")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        model_path, model = model_or_tiny(args.model, tmp)
        if args.model is None:
            long_context(Path(model_path))
        per_token = kv_bytes_per_token(Path(model_path))
        # The session's entry (buffers grow 256 tokens at a time) and --room one-offs.
        room = per_token * (args.session_tokens + 512 + args.room * (args.one_off_tokens + 256))
        flags = ["--temp", "0", "--prompt-cache-disk-gb", "0"]
        flags += ["--prompt-cache-gb", f"{room / 1e9:.6f}"]
        proc, base = start_omni(model_path, tmp / "omni.db", *flags)
        try:
            with httpx.Client(base_url=base, timeout=3600) as http:
                session = {"instructions": text_of(http, model, args.session_tokens),
                           "prompt_cache_key": "codex-session"}  # fmt: skip
                first = ask(http, model, **session, input="Read the log.")
                one_offs, filler = [], text_of(http, model, args.one_off_tokens)
                for i in range(args.one_offs):
                    text = f"One-off {i}: " + filler
                    one_offs.append(ask(http, model, input=text))
                again = ask(http, model, input="And?", previous_response_id=one_offs[0]["id"])
                then = ask(http, model, **session, input="Next step.",
                           previous_response_id=first["id"])  # fmt: skip
        finally:
            proc.terminate()
            proc.wait()
    sizes = [o["input_tokens"] for o in one_offs]
    result = {
        "model": model,
        "room_bytes": room,
        "session_first": first,
        "one_off_tokens": {"min": min(sizes), "max": max(sizes), "count": len(sizes)},
        "one_off_again": again,
        "session_next": then,
        "session_kept": then["cached"] / then["input_tokens"],
        "session_ttft_ratio": then["ttft_s"] / first["ttft_s"],
    }
    print(f"memory tier: {room / 1e6:.1f} MB ({per_token} bytes a token); {len(sizes)} one-offs"
          f" of {min(sizes)}-{max(sizes)} tokens passed through")  # fmt: skip
    print(f"the first one-off again: {again['cached']} of {again['input_tokens']} tokens cached")
    print(f"the session's next turn: {then['cached']} of {then['input_tokens']} tokens cached"
          f" ({result['session_kept']:.3f}); time to first token {then['ttft_s']:.3f} s against"
          f" {first['ttft_s']:.3f} s cold ({result['session_ttft_ratio']:.3f}x)")  # fmt: skip
    write_results("prefix_pressure", result)


if __name__ == "__main__":
    main()
