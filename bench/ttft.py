"""Where a streamed request's time to first token goes: before the engine, in it, after it.

    python bench/ttft.py [--model PATH_OR_ID] [--requests 12] [--warmup 2]

`omni serve` runs with its engine's step trace (OMNI_ENGINE_TRACE); one client sends
--requests streamed requests one after another (chat and Responses, alternating, each prompt
new, 2 tokens, greedy, prefix cache off). The client's clock and the engine's trace share
Linux's monotonic clock (time.perf_counter), so each request splits into: request sent ->
the engine takes the job (HTTP, validation, the chat template, the log's opening commit, the
pipe), the engine's first step (prefill and first token, as raw mlx-lm does it), and the
first token leaving the engine -> its delta at the client (the pipe, detokenizing, the log's
commit of the delta, SSE). Raw mlx_lm.stream_generate's first token on the same prompts,
in-process after the server stopped, is the baseline for the engine's step. This is what
the overhead bench's TTFT difference (which also counts the client's new connection each
request and its own parsing) cannot resolve to a few milliseconds.
Prints medians; writes bench/out/ttft.json and .png. Linux only (the shared clock).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Bars, write_results  # noqa: E402
from _server import chat_ids, start_omni  # noqa: E402

NO_CACHE = {"Cache-Control": "no-cache"}
TOPIC = "Write a short story about a lighthouse keeper and a storm."


def text(i: int) -> str:
    return f"{i}. {TOPIC}"


def request_body(model: str, i: int) -> tuple[str, dict[str, Any]]:
    if i % 2:
        path, body = "/v1/responses", {"input": text(i), "max_output_tokens": 2}
    else:
        messages = [{"role": "user", "content": text(i)}]
        path, body = "/v1/chat/completions", {"messages": messages, "max_tokens": 2}
    return path, body | {"model": model, "temperature": 0, "stream": True}


def first_delta(client: httpx.Client, model: str, i: int) -> tuple[float, float]:
    """Through httpx: (sent, first delta received), perf_counter seconds; the clock also
    runs while httpx builds the request and parses the lines."""
    path, body = request_body(model, i)
    sent = time.perf_counter()
    first = 0.0
    with client.stream("POST", path, json=body, headers=NO_CACHE) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not first and line.startswith("data: ") and _is_delta(line[6:]):
                first = time.perf_counter()
    return sent, first or time.perf_counter()


class Wire:
    """HTTP/1.1 on one kept-alive socket, as little client as there can be: the clock starts
    as the request's bytes are written and stops as the bytes of the first delta are read, so
    what a client library does around them (httpx: request building, line splitting) is not
    counted as the server's."""

    def __init__(self, base: str):
        host, port = base.rsplit("//", 1)[1].rsplit(":", 1)
        self.host = host
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def first_delta(self, model: str, i: int) -> tuple[float, float]:
        path, body = request_body(model, i)
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/json\r\n"
            f"cache-control: no-cache\r\ncontent-length: {len(data)}\r\n\r\n"
        )
        sent = time.perf_counter()
        self.sock.sendall(head.encode() + data)
        first = 0.0
        raw, events = b"", b""  # bytes not yet de-chunked; SSE bytes not yet split
        headers_done, ended = False, False
        while not ended:
            got = self.sock.recv(1 << 16)
            arrived = time.perf_counter()
            if not got:
                raise SystemExit("the server closed the connection")
            raw += got
            if not headers_done:
                if b"\r\n\r\n" not in raw:
                    continue
                head_bytes, raw = raw.split(b"\r\n\r\n", 1)
                if not head_bytes.startswith(b"HTTP/1.1 200"):
                    raise SystemExit(f"{path}: {head_bytes.splitlines()[0]!r}")
                headers_done = True
            while b"\r\n" in raw:  # whole chunks: size line, data, CRLF
                size_line, rest = raw.split(b"\r\n", 1)
                size = int(size_line, 16)
                if len(rest) < size + 2:
                    break
                events += rest[:size]
                raw = rest[size + 2 :]
                ended = size == 0
            *whole, events = events.split(b"\n\n")
            for line in (line for event in whole for line in event.split(b"\n")):
                if not first and line.startswith(b"data: ") and _is_delta(line[6:].decode()):
                    first = arrived
        return sent, first or time.perf_counter()


def _is_delta(data: str) -> bool:
    if data == "[DONE]":
        return False
    event = json.loads(data)
    if event.get("type") == "response.output_text.delta":
        return True
    return any(c.get("delta", {}).get("content") for c in event.get("choices", []))


def raw_first_tokens(model_path: str, n: int) -> list[float]:
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = load(model_path)
    sampler = make_sampler(temp=0.0)
    out = []
    for i in range(n):
        prompt = chat_ids(tokenizer, [{"role": "user", "content": text(i)}])
        start = time.perf_counter()
        for _ in stream_generate(model, tokenizer, prompt, max_tokens=2, sampler=sampler):
            out.append(time.perf_counter() - start)
            break
    return out


def main() -> None:
    from omni.cli import omni_home
    from omni.runtime.model_source import resolve_model

    source = resolve_model(ARGS.model, omni_home(), lambda m: print(m, file=sys.stderr))
    marks: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        flags = ("--prompt-cache-entries", "0")
        env = {"OMNI_ENGINE_TRACE": str(trace)}
        proc, base = start_omni(source.path, Path(tmp) / "bench.db", *flags, env=env)
        try:
            model_id = httpx.get(f"{base}/v1/models").json()["data"][0]["id"]
            with httpx.Client(base_url=base, timeout=600) as client:
                wire = Wire(base)
                for i in range(ARGS.requests):
                    if ARGS.client == "httpx":
                        marks.append(first_delta(client, model_id, i))
                    else:
                        marks.append(wire.first_delta(model_id, i))
                    time.sleep(0.2)  # the engine is idle when the next one comes
                wire.sock.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        rows = json.loads(trace.read_text())["rows"]
    taken = [row for row in rows if row[2]]  # the steps that received a job: one each
    if len(taken) != len(marks):
        raise SystemExit(f"{len(marks)} requests but {len(taken)} jobs in the engine's trace")
    parts: dict[str, list[float]] = {"before": [], "engine": [], "after": [], "ttft": []}
    for (sent, first), row in list(zip(marks, taken, strict=True))[ARGS.warmup :]:
        end, step = row[0], row[1]
        parts["before"].append(end - step - sent)
        parts["engine"].append(step)
        parts["after"].append(first - end)
        parts["ttft"].append(first - sent)
    raw = raw_first_tokens(source.path, ARGS.requests)[ARGS.warmup :]  # the same prompts
    ms = {k: 1000 * statistics.median(v) for k, v in parts.items()}
    ms["raw"] = 1000 * statistics.median(raw)
    server = ms["before"] + ms["after"]
    print(
        f"model {source.model_id}; median of {len(raw)} requests (2 tokens, greedy), "
        f"client: {ARGS.client}"
    )
    print(f"{'':<44}{'ms':>8}")
    print(f"{'request sent -> the engine takes it':<44}{ms['before']:>8.1f}")
    print(f"{'engine: prefill and first token':<44}{ms['engine']:>8.1f}")
    print(f"{'first token leaves the engine -> client':<44}{ms['after']:>8.1f}")
    print(f"{'time to first token (client)':<44}{ms['ttft']:>8.1f}")
    print(f"{'raw mlx_lm.stream_generate first token':<44}{ms['raw']:>8.1f}")
    print(f"the server's own share (before + after): {server:.1f} ms")
    result: dict[str, Any] = {
        "model": source.model_id,
        "client": ARGS.client,
        "requests": len(raw),
        "median_ms": ms,
        "server_share_ms": server,
        "per_request_ms": {k: [1000 * x for x in v] for k, v in parts.items()},
        "raw_ms": [1000 * x for x in raw],
    }
    bars = {
        "before the engine": ms["before"],
        "engine step": ms["engine"],
        "after the engine": ms["after"],
        "raw first token": ms["raw"],
    }
    write_results(
        "ttft",
        result,
        [Bars("time to first token, split (median)", "ms", bars)],
        f"TTFT split: {source.model_id}",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: SmolLM2)")
    p.add_argument("--requests", type=int, default=12, help="requests, one after another")
    p.add_argument("--warmup", type=int, default=2, help="first requests left out")
    p.add_argument(
        "--client",
        choices=("socket", "httpx"),
        default="socket",
        help="the requests' client: bytes on a socket (default), or httpx, whose own work "
        "then counts in the server's share",
    )
    ARGS = p.parse_args()
    main()
