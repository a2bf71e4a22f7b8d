"""The inspector's reads on a big log: 10,000 responses and 1,000 chat completions in
1,000,000 events.

    python bench/inspection.py [--responses 10000] [--deltas 90] [--repeat 20] [--db PATH]

Builds the log through the real migrations (so the `summaries` triggers run on every row,
as they do under the server), in one transaction with executemany; each response is its
request, created, in_progress, output_item.added, content_part.added, --deltas deltas, the
three .done events and its terminal event (completed; some failed, incomplete, cancelled,
background, a few still running). Then times, --repeat times each (median and max ms): the
latest 50 rows of the `responses` and `chat_completions` views, today's failed responses, one
response's `timeline`, and Inspector.recent()/detail()/timeline()/stats(); then the list as
the inspector's filters ask it (Inspector.page): a text search that finds the one response
whose input holds a rare word (planted in one of them), a common word's newest 50, filters
combined, and the sorts by duration and tokens with their second page. Target: each well
under 100 ms (the list and search: under 200 ms). Writes bench/out/inspect.json.
"""

from __future__ import annotations

import os
import sys

# This file is named like the standard library's `inspect`: its folder must not shadow it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from omni.db import upgrade  # noqa: E402
from omni.inspect import Inspector, open_log  # noqa: E402
from omni.inspect.search import Filters  # noqa: E402

_spec = importlib.util.spec_from_file_location("_plot", os.path.join(_HERE, "_plot.py"))
assert _spec is not None and _spec.loader is not None
_plot = importlib.util.module_from_spec(_spec)
sys.modules["_plot"] = _plot  # its dataclasses look their module up
_spec.loader.exec_module(_plot)

TARGET_MS = 100.0
LIST_TARGET_MS = 200.0  # a filtered list or a text search, as a person asks the inspector
RARE = "quetzalcoatl"  # in one response's input among thousands
WORDS = "the quick brown fox jumps over a lazy dog while seven bright stars watch it".split()
Row = tuple[str, int, str, str, int]


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _response(rid: str, created_s: int, status: str, background: bool, **extra: Any) -> dict:
    return {
        "id": rid, "object": "response", "created_at": created_s, "status": status,
        "background": background, "completed_at": None, "error": None,
        "incomplete_details": None, "instructions": None, "max_output_tokens": 256,
        "max_tool_calls": None, "metadata": {}, "model": "smollm2-135m", "output": [],
        "parallel_tool_calls": True, "previous_response_id": None, "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None}, "safety_identifier": None,
        "service_tier": "default", "store": True, "temperature": 1.0,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
        "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled", "usage": None, "user": None,
        **extra,
    }  # fmt: skip


def response_rows(i: int, t0: int, deltas: int) -> list[Row]:
    """One response's events: (stream_id, seq, type, data, created_at)."""
    rid, mid = f"resp_{i:032x}", f"msg_{i:032x}"
    background, running = i % 10 == 3, i % 500 == 499
    status = "completed"
    if i % 100 in (7, 8, 9):
        status = "failed"
    elif i % 100 in (11, 12, 13, 14, 15):
        status = "incomplete"
    elif i % 100 in (21, 22):
        status = "cancelled"
    first = "queued" if background else "in_progress"
    base = _response(rid, t0 // 1000, first, background)
    asked = f"question {i}" + (f" {RARE}" if i == 4321 else "")
    request = {
        "kind": "response",
        "body": {"model": "smollm2-135m", "input": asked},
        "input": [{"id": f"msg_in_{i:028x}", "type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": f"Tell me about thing {i}."}],
                   "status": "completed"}],
        "response": base, "model_id": "smollm2-135m", "prompt_tokens": 31,
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 256},
        "owner": "team-a" if i % 2 else "team-b",
    }  # fmt: skip
    rows: list[Row] = [(f"{rid}/request", 0, "omni.request.accepted", _dump(request), t0)]
    seq = 0

    def add(type_: str, at: int, **fields: Any) -> None:
        nonlocal seq
        rows.append((rid, seq, type_, _dump({"type": type_, "sequence_number": seq, **fields}), at))
        seq += 1

    add("response.created", t0, response=base)
    add("response.queued" if background else "response.in_progress", t0, response=base)
    if background:
        add("response.in_progress", t0 + 40, response={**base, "status": "in_progress"})
    at = t0 + 60 + i % 50
    where = {"item_id": mid, "output_index": 0, "content_index": 0}
    item = {"id": mid, "type": "message", "role": "assistant", "status": "in_progress"}
    add("response.output_item.added", at, output_index=0, item={**item, "content": []})
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    add("response.content_part.added", at, **where, part=part)
    n = deltas - (2 if background else 0)
    text = ""
    for k in range(n):
        word = WORDS[(i + k) % len(WORDS)] + " "
        text += word
        add("response.output_text.delta", at + 20 * k, **where, delta=word, logprobs=[])
        if running and k == n // 2:
            return rows  # still generating when the log was read
    end = at + 20 * n
    add("response.output_text.done", end, **where, text=text, logprobs=[])
    part = {**part, "text": text}
    add("response.content_part.done", end, **where, part=part)
    done = {**item, "status": "completed", "content": [part]}
    add("response.output_item.done", end, output_index=0, item=done)
    usage = {
        "input_tokens": 31, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": n, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 31 + n,
    }  # fmt: skip
    final = {**base, "status": status, "output": [done], "usage": usage}
    if status == "failed":
        final["error"] = {"code": "server_error", "message": "the engine process exited"}
    if status == "incomplete":
        final["incomplete_details"] = {"reason": "max_output_tokens"}
    terminal = {"completed": "response.completed", "failed": "response.failed"}
    add(terminal.get(status, "response.incomplete"), end, response=final)
    return rows


def chat_rows(i: int, t0: int) -> list[Row]:
    """One stored chat completion: its request, the role chunk, 7 content chunks, the
    finish chunk and its usage chunk."""
    cid = f"chatcmpl-{i:032x}"
    head = {"id": cid, "object": "chat.completion.chunk", "created": t0 // 1000,
            "model": "smollm2-135m"}  # fmt: skip
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": f"hi {i}"}],
            "store": True}  # fmt: skip
    rows: list[Row] = [
        (f"{cid}/request", 0, "omni.request.accepted", _dump({"kind": "chat", "body": body}), t0)
    ]

    def chunk(delta: Any, finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _dump({**head, "choices": [choice], "usage": None})

    rows.append((cid, 0, "chat.completion.chunk", chunk({"role": "assistant", "content": ""}), t0))
    for k in range(7):
        delta = {"content": WORDS[k] + " "}
        rows.append((cid, k + 1, "chat.completion.chunk", chunk(delta), t0 + 50 + 20 * k))
    end = t0 + 50 + 140
    rows.append((cid, 8, "chat.completion.chunk", chunk({}, "stop"), end))
    usage = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
    rows.append(
        (cid, 9, "chat.completion.usage", _dump({**head, "choices": [], "usage": usage}), end)
    )
    return rows


def build(path: str, responses: int, deltas: int) -> dict[str, float]:
    """The log at `path`: migrated, then filled in one transaction."""
    upgrade(path, verify=False)
    start_ms = int(time.time() * 1000) - responses * 1000  # one a second, up to now
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    count, began = 0, time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")

    def rows() -> Iterator[Row]:
        nonlocal count
        for i in range(responses):
            t0 = start_ms + i * 1000
            made = response_rows(i, t0, deltas)
            if i % 10 == 5:
                made += chat_rows(i, t0 + 500)
            count += len(made)
            yield from made

    conn.executemany(
        "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
        rows(),
    )
    conn.execute("COMMIT")
    seconds = time.perf_counter() - began
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"events": count, "build_s": round(seconds, 1), "events_per_s": round(count / seconds)}


def timed(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    fn()  # a first read warms the page cache, as a person's second query finds it
    ms = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - began) * 1000)
    return {"median_ms": round(statistics.median(ms), 2), "max_ms": round(max(ms), 2)}


def measure(path: str, repeat: int) -> dict[str, dict[str, float]]:
    engine = open_log(path)
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        ins = Inspector(conn)
        middle = conn.exec_driver_sql(
            "SELECT id FROM summaries WHERE kind = 'response' ORDER BY position"
            " LIMIT 1 OFFSET (SELECT count(*) / 2 FROM summaries)"
        ).scalar_one()
        today = time.strftime("%Y-%m-%d", time.gmtime())

        def sql(query: str, *args: Any) -> Callable[[], Any]:
            return lambda: raw.execute(query, args).fetchall()

        cases = {
            "responses: latest 50": sql("SELECT * FROM responses ORDER BY created DESC LIMIT 50"),
            "responses: failed today": sql(
                "SELECT id, error_code, error_message FROM responses"
                " WHERE status = 'failed' AND created >= ?",
                today,
            ),
            "chat_completions: latest 50": sql(
                "SELECT * FROM chat_completions ORDER BY created DESC LIMIT 50"
            ),
            "timeline: one response": sql(
                "SELECT * FROM timeline WHERE stream_id = ? ORDER BY seq", middle
            ),
            "Inspector.recent(50)": lambda: ins.recent(limit=50),
            "Inspector.recent(failed)": lambda: ins.recent(status="failed", limit=50),
            "Inspector.detail": lambda: ins.detail(middle),
            "Inspector.timeline": lambda: ins.timeline(middle),
            "Inspector.stats(1h)": lambda: ins.stats(since_ms=int(time.time() * 1000) - 3_600_000),
            "Inspector.stats(all)": lambda: ins.stats(),
        }
        hour_ago = int(time.time() * 1000) - 3_600_000
        lists: dict[str, Callable[[], Any]] = {
            "search: one rare word": lambda: ins.page(Filters(text=RARE)),
            "search: common word, 50": lambda: ins.page(Filters(text="fox")),
            "search + filters": lambda: ins.page(
                Filters(text="lazy", kind="response", status="completed", owner="team-a")
            ),
            "list: failed, team-a, 1h": lambda: ins.page(
                Filters(status="failed", owner="team-a", since_ms=hour_ago)
            ),
            "list: by duration": lambda: ins.page(Filters(sort="duration")),
            "list: by tokens, page 2": lambda: ins.page(
                Filters(sort="tokens"), after=ins.page(Filters(sort="tokens")).next_cursor
            ),
            "list: oldest first": lambda: ins.page(Filters(sort="oldest")),
        }
        found = [s.id for s in ins.page(Filters(text=RARE)).rows]
        assert found in ([], [f"resp_{4321:032x}"]), found  # [] below 4,322 responses
        return {name: timed(fn, repeat) for name, fn in {**cases, **lists}.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--responses", type=int, default=10_000)
    ap.add_argument("--deltas", type=int, default=90)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--db", help="build the log here (default: a temporary file)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or str(Path(tmp) / "inspect.db")
        for suffix in ("", "-wal", "-shm"):
            Path(path + suffix).unlink(missing_ok=True)
        built = build(path, args.responses, args.deltas)
        size_mb = round(Path(path).stat().st_size / 2**20)
        print(f"log: {built['events']:,} events ({args.responses:,} responses), {size_mb} MiB,"
              f" built in {built['build_s']} s ({built['events_per_s']:,} events/s with the"
              " triggers)")  # fmt: skip
        began = time.perf_counter()
        conn = sqlite3.connect(path)
        rebuild = importlib.import_module("omni.migrations.versions.0005_views").REBUILD
        with conn:
            for statement in rebuild:
                conn.execute(statement)
        conn.close()
        rebuild_s = round(time.perf_counter() - began, 2)
        print(f"summaries rebuilt from the whole log in {rebuild_s} s")
        cases = measure(path, args.repeat)
    print(f"\n{'read':<30} {'median ms':>10} {'max ms':>10}  target < {TARGET_MS:g} ms"
          f" (search, list: < {LIST_TARGET_MS:g})")  # fmt: skip
    for name, t in cases.items():
        target = LIST_TARGET_MS if name.startswith(("search", "list")) else TARGET_MS
        verdict = "ok" if t["max_ms"] < target else "SLOW"
        print(f"{name:<30} {t['median_ms']:>10.2f} {t['max_ms']:>10.2f}  {verdict}")
    result = {
        "log": {**built, "responses": args.responses, "size_mib": size_mb},
        "rebuild_s": rebuild_s,
        "target_ms": TARGET_MS,
        "list_target_ms": LIST_TARGET_MS,
        "reads": cases,
    }
    _plot.write_results("inspect", result)


if __name__ == "__main__":
    main()
