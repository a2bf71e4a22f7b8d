"""A Codex-shaped session over the Responses WebSocket against the same over HTTP.

    python bench/session.py [--model PATH_OR_ID] [--turns 20] [--prefix-tokens 10000]
                            [--turn-tokens 60] [--max-output-tokens 8]

A Codex session: a long prefix (instructions and tools, --prefix-tokens of the model's
tokenizer) sent every turn, then small turns (a user message of about --turn-tokens tokens,
a short answer). Two sessions, each with its own prefix, against one `omni serve`, turn by turn
in turn (HTTP's turn i, then the socket's, the order turning each turn), so a machine whose
speed drifts weighs on both:
  http:      `POST /v1/responses`, streamed, store false, the whole history resent each turn
             (Codex's HTTP way);
  websocket: one connection; `response.create` with store false, `previous_response_id` and
             only the turn's new item (Codex's WebSocket way: the connection keeps the chain).
Per turn: the time from sending to the response's end (completed, or incomplete at the
output limit), and the tokens prefilled
(usage.input_tokens - input_tokens_details.cached_tokens): with the prefix cache each turn
after the first must prefill about its own new tokens only. The ratio is the median of each
turn's own ratio, websocket/http, over turns 2 on. Greedy (temperature 0).
Prints a table per turn and writes bench/out/session.json and bench/out/session.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Lines, write_results  # noqa: E402
from _server import model_or_tiny, start_omni  # noqa: E402

WORDS = "the lighthouse keeper logs the weather and the ships that pass in the night".split()
# A turn's answer ends at --max-output-tokens: incomplete, as Codex's short turns may.
ENDED = ("response.completed", "response.incomplete")
TOOLS = [
    {
        "type": "function",
        "name": name,
        "description": f"{name} in the workspace",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    for name in ("read_file", "list_dir", "apply_patch", "run_tests")
]


TOKENS_PER_WORD = [1.5]  # the model's, measured by main() on its tokenizer


def text_of(tokens: int, salt: str) -> str:
    """About `tokens` tokens of the model's tokenizer, `salt` first."""
    words = [salt] + [WORDS[i % len(WORDS)] for i in range(int(tokens / TOKENS_PER_WORD[0]))]
    return " ".join(words)


def measure_words(model_path: str) -> None:
    """How many tokens a word of WORDS is for this model's tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    sample = " ".join(WORDS[i % len(WORDS)] for i in range(1000))
    TOKENS_PER_WORD[0] = len(tokenizer.encode(sample)) / 1000


def body(model: str, instructions: str, max_tokens: int, **fields: Any) -> dict[str, Any]:
    return {
        "model": model,
        "instructions": instructions,
        "tools": TOOLS,
        "temperature": 0,
        "max_output_tokens": max_tokens,
        "store": False,
        **fields,
    }


def figures(completed: dict[str, Any], started: float) -> dict[str, float]:
    usage = completed["response"]["usage"]
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "seconds": time.perf_counter() - started,
        "input_tokens": usage["input_tokens"],
        "prefilled": usage["input_tokens"] - cached,
    }


class HttpSession:
    def __init__(self, client: httpx.Client, model: str, instructions: str, tokens: int):
        self.client, self.model, self.instructions, self.tokens = (
            client,
            model,
            instructions,
            tokens,
        )
        self.history: list[dict[str, Any]] = []

    def turn(self, said: str) -> dict[str, float]:
        self.history.append({"role": "user", "content": said})
        request = body(self.model, self.instructions, self.tokens, input=self.history, stream=True)
        started = time.perf_counter()
        completed = None
        with self.client.stream("POST", "/v1/responses", json=request) as answer:
            answer.raise_for_status()
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    if event["type"] in ENDED:
                        completed = event
        assert completed is not None, "the turn did not complete"
        out = [i for i in completed["response"]["output"] if i["type"] == "message"]
        self.history += [{"role": "assistant", "content": m["content"]} for m in out]
        return figures(completed, started)


class SocketSession:
    def __init__(self, socket: ClientConnection, model: str, instructions: str, tokens: int):
        self.socket, self.model, self.instructions, self.tokens = (
            socket,
            model,
            instructions,
            tokens,
        )
        self.previous: str | None = None

    def turn(self, said: str) -> dict[str, float]:
        fields: dict[str, Any] = {"input": [{"role": "user", "content": said}]}
        if self.previous is not None:
            fields["previous_response_id"] = self.previous
        request = {"type": "response.create", **body(self.model, self.instructions,
                                                     self.tokens, **fields)}  # fmt: skip
        started = time.perf_counter()
        self.socket.send(json.dumps(request))
        while True:
            event = json.loads(self.socket.recv())
            if event["type"] in ("error", "response.failed"):
                raise RuntimeError(f"the turn ended {event['type']}: {str(event)[:300]}")
            if event["type"] in ENDED:
                self.previous = event["response"]["id"]
                return figures(event, started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a model path or id (default: a tiny random llama)")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--prefix-tokens", type=int, default=10000)
    parser.add_argument("--turn-tokens", type=int, default=60)
    parser.add_argument("--max-output-tokens", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path, label = model_or_tiny(args.model, Path(tmp))
        if args.model is None:  # the tiny llama's context must hold the whole session
            config = Path(path) / "config.json"
            doc = json.loads(config.read_text())
            doc["max_position_embeddings"] = 32768  # RoPE: no weights depend on it
            config.write_text(json.dumps(doc))
        measure_words(path)
        server, base_url = start_omni(path, Path(tmp) / "bench.db")
        try:
            rows = run(args, base_url, label)
        finally:
            server.terminate()
            server.wait(timeout=60)
    report(args, label, rows)


def run(args: argparse.Namespace, base_url: str, model: str) -> list[dict[str, Any]]:
    ws_url = base_url.replace("http://", "ws://") + "/v1/responses"
    rows: list[dict[str, Any]] = []
    with httpx.Client(base_url=base_url, timeout=600) as client, connect(ws_url) as socket:
        sessions = {
            "http": HttpSession(
                client, model, text_of(args.prefix_tokens, "http"), args.max_output_tokens
            ),
            "websocket": SocketSession(
                socket, model, text_of(args.prefix_tokens, "socket"), args.max_output_tokens
            ),
        }
        for turn in range(1, args.turns + 1):
            order = list(sessions) if turn % 2 else list(reversed(sessions))
            row: dict[str, Any] = {"turn": turn}
            for name in order:
                said = text_of(args.turn_tokens, f"turn {turn} of {name}:")
                row[name] = sessions[name].turn(said)
            rows.append(row)
            print(
                f"turn {turn:2d}  "
                + "  ".join(
                    f"{n} {row[n]['seconds']:6.2f} s {int(row[n]['prefilled']):6d} prefilled"
                    for n in sessions
                ),
                flush=True,
            )
    return rows


def report(args: argparse.Namespace, model: str, rows: list[dict[str, Any]]) -> None:
    later = rows[1:]
    ratio = statistics.median(r["websocket"]["seconds"] / r["http"]["seconds"] for r in later)
    prefilled = {
        n: statistics.median(r[n]["prefilled"] for r in later) for n in ("http", "websocket")
    }
    seconds = {n: statistics.median(r[n]["seconds"] for r in later) for n in ("http", "websocket")}
    first = {n: rows[0][n] for n in ("http", "websocket")}
    print(
        f"model {model}, {args.turns} turns, a ~{args.prefix_tokens}-token prefix, turns of"
        f" ~{args.turn_tokens} tokens, {args.max_output_tokens} output tokens, greedy"
    )
    for name in ("http", "websocket"):
        print(
            f"{name:9s}  turn 1: {first[name]['seconds']:.2f} s, {int(first[name]['prefilled'])}"
            f" prefilled;  turns 2-{args.turns} (medians): {seconds[name]:.3f} s,"
            f" {prefilled[name]:.0f} prefilled of {later[-1][name]['input_tokens']:.0f} at the end"
        )
    print(f"websocket/http time per turn, turns 2 on: {ratio:.3f}x (median of each turn's ratio)")
    turns = [float(r["turn"]) for r in rows]
    result = {
        "model": model,
        "args": vars(args),
        "turns": rows,
        "ratio_seconds_websocket_over_http": ratio,
        "median_seconds": seconds,
        "median_prefilled": prefilled,
    }
    write_results(
        "session",
        result,
        [
            Lines(
                "time per turn",
                "turn",
                "seconds",
                {n: (turns, [r[n]["seconds"] for r in rows]) for n in ("http", "websocket")},
            ),
            Lines(
                "tokens prefilled per turn",
                "turn",
                "tokens",
                {n: (turns, [r[n]["prefilled"] for r in rows]) for n in ("http", "websocket")},
                logy=True,
            ),
        ],
        f"a Codex-shaped session, websocket/http {ratio:.3f}x",
    )


if __name__ == "__main__":
    main()
