"""Request intake: what a burst of requests costs the server's event loop before they reach the
engine, and how long the burst's requests wait for their response to start.

    python bench/intake.py [--model PATH_OR_ID] [--burst 64] [--bursts 8]

`omni serve` runs as a process of its own (replay cache on, then off with --no-cache). A client
opens `--burst` connections, writes one streamed greedy chat completion of 1 token on each (all
distinct prompts) and reads them to the end; `--bursts` times, after one unmeasured burst. The
server's CPU comes from Linux's /proc: its main thread (the event loop: HTTP, validation, the
chat template and tokenizer, the records, the replay-cache lookup) and the whole process (the
engine runs in another). The baseline, raw mlx-lm in this process: its tokenizer's
`apply_chat_template` on the same messages, the one piece of intake any server pays.
Without --model, a tiny random-weight llama (4 layers, 256 wide) is built in a temporary folder:
its prefill is fast, so the engine does not hide the intake.
Prints a table and writes bench/out/intake.json and bench/out/intake.png.
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Bars, write_results  # noqa: E402
from _server import chat_body, model_or_tiny, start_omni  # noqa: E402

TICK_MS = 10.0  # /proc's CPU times are in clock ticks of 1/100 s on Linux


def text(burst: int, i: int) -> str:
    return f"Request {i} of burst {burst}: say something about the number {i * 7 + burst}."


def cpu_ticks(pid: int, thread: int | None = None) -> int:
    """utime + stime of a process (or one of its threads), in clock ticks."""
    path = f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def burst(port: int, model: str, n: int, index: int) -> tuple[list[float], list[float]]:
    """n requests written at once on n connections; each one's first bytes and end (s)."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    start = time.perf_counter()
    for i, sock in enumerate(socks):
        body = json.dumps(chat_body(model, text(index, i), 1)).encode()
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
    selector = selectors.DefaultSelector()
    for i, sock in enumerate(socks):
        selector.register(sock, selectors.EVENT_READ, i)
    first: dict[int, float] = {}
    done: dict[int, float] = {}
    head: dict[int, bytes] = {}
    tail = {i: b"" for i in range(n)}
    while len(done) < n:
        for key, _ in selector.select(timeout=60):
            i = key.data
            data = key.fileobj.recv(65536)  # type: ignore[union-attr]
            now = time.perf_counter() - start
            first.setdefault(i, now)
            head.setdefault(i, data[:64])
            tail[i] = tail[i][-16:] + data
            if not data or b"[DONE]" in tail[i]:
                if not head[i].startswith(b"HTTP/1.1 200") or not data:
                    raise SystemExit(f"request {i} of burst {index} failed: {head[i]!r}")
                done[i] = now
                selector.unregister(key.fileobj)
    for sock in socks:
        sock.close()
    return [first[i] for i in range(n)], [done[i] for i in range(n)]


def measure(model_path: str, flags: tuple[str, ...], tmp: Path) -> dict[str, Any]:
    db = tmp / f"intake{len(flags)}.db"
    proc, base = start_omni(model_path, db, "--max-batch-size", str(ARGS.burst), *flags)
    try:
        model = httpx.get(f"{base}/v1/models").json()["data"][0]["id"]
        port = int(base.rsplit(":", 1)[1])
        burst(port, model, ARGS.burst, -1)  # warm-up: shapes compiled, caches filled
        loop0, all0 = cpu_ticks(proc.pid, proc.pid), cpu_ticks(proc.pid)
        firsts: list[float] = []
        ends: list[float] = []
        for b in range(ARGS.bursts):
            f, e = burst(port, model, ARGS.burst, b)
            firsts += f
            ends.append(max(e))
        loop1, all1 = cpu_ticks(proc.pid, proc.pid), cpu_ticks(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    n = ARGS.burst * ARGS.bursts
    firsts.sort()
    return {
        "flags": list(flags),
        "requests": n,
        "loop_cpu_ms_per_request": (loop1 - loop0) * TICK_MS / n,
        "server_cpu_ms_per_request": (all1 - all0) * TICK_MS / n,
        "first_bytes_p50_ms": 1000 * statistics.median(firsts),
        "first_bytes_p95_ms": 1000 * firsts[int(0.95 * (len(firsts) - 1))],
        "burst_end_median_ms": 1000 * statistics.median(ends),
    }


def raw_template_ms(model_path: str) -> float:
    """Raw mlx-lm: its tokenizer's chat template and encoding of one request's messages."""
    from mlx_lm.utils import load_tokenizer

    tokenizer = load_tokenizer(Path(model_path))
    messages = [[{"role": "user", "content": text(b, i)}] for b in range(4) for i in range(64)]
    for m in messages[:8]:
        tokenizer.apply_chat_template(m, add_generation_prompt=True)
    start = time.perf_counter()
    for m in messages:
        tokenizer.apply_chat_template(m, add_generation_prompt=True)
    return 1000 * (time.perf_counter() - start) / len(messages)


def main() -> None:
    if not Path("/proc/self/stat").exists():
        raise SystemExit("this benchmark reads CPU times from Linux's /proc")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        model_path, model_id = model_or_tiny(ARGS.model, tmp)
        rows = {
            "replay cache on": measure(model_path, (), tmp),
            "replay cache off": measure(model_path, ("--no-cache",), tmp),
        }
        raw = raw_template_ms(model_path)
    print(
        f"model {model_id}; {ARGS.bursts} bursts of {ARGS.burst} streamed greedy chat "
        f"completions (1 token each), distinct prompts"
    )
    print(
        f"{'':<18}{'loop CPU ms/req':>16}{'server CPU ms/req':>18}{'x raw template':>15}"
        f"{'first bytes p50':>16}{'p95 ms':>8}{'burst end ms':>13}"
    )
    for name, r in rows.items():
        print(
            f"{name:<18}{r['loop_cpu_ms_per_request']:>16.2f}"
            f"{r['server_cpu_ms_per_request']:>18.2f}"
            f"{r['loop_cpu_ms_per_request'] / raw:>15.1f}{r['first_bytes_p50_ms']:>16.1f}"
            f"{r['first_bytes_p95_ms']:>8.1f}{r['burst_end_median_ms']:>13.0f}"
        )
    print(f"raw mlx-lm apply_chat_template: {raw:.3f} ms a request")
    result = {
        "model": model_id,
        "burst": ARGS.burst,
        "bursts": ARGS.bursts,
        "raw_chat_template_ms": raw,
        "variants": rows,
    }
    write_results(
        "intake",
        result,
        [
            Bars(
                "event loop CPU a request",
                "ms",
                {
                    **{k: v["loop_cpu_ms_per_request"] for k, v in rows.items()},
                    "raw chat template": raw,
                },
                fmt="{:.2f}",
            ),
            Bars(
                "first bytes of a burst's responses, p50",
                "ms",
                {k: v["first_bytes_p50_ms"] for k, v in rows.items()},
            ),
        ],
        f"request intake, {model_id}, bursts of {ARGS.burst}",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: a tiny llama)")
    p.add_argument("--burst", type=int, default=64, help="requests written at once")
    p.add_argument("--bursts", type=int, default=8, help="measured bursts")
    ARGS = p.parse_args()
    main()
