"""`omni ls`, `omni show`, `omni stats`, `omni replay`: one read of the log each."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from omni.api.sse import DONE_FRAME, chunk_frames, frame
from omni.cli.inspect.layout import Column
from omni.cli.inspect.output import Out, ms, rate, text
from omni.cli.inspect.reading import inspector, unknown
from omni.inspect import STATUSES, Detail, Inspector, Stats, Summary, iso
from omni.inspect.search import Filters
from omni.vocabulary import COMPLETION_ENDS, MESSAGE, MESSAGE_CANCELLED

# Ids and numbers are never folded; where the rest, folded, is still too wide for the
# terminal, PREVIEW goes first, then CREATED, TOK/S, MODEL, TTFT and OWNER (80 columns keep
# a chat completion's id, its status, owner, tokens and TTFT).
LS_COLUMNS = (
    Column("ID", fold=None),
    Column("CREATED", fold=len("2026-12-02"), drop=2),  # the time under the date
    Column("STATUS", fold=max(map(len, STATUSES))),  # "(deleted)" under the status
    Column("OWNER", fold=8, drop=6),
    Column("MODEL", fold=16, drop=4),
    Column("TOKENS", fold=None),
    Column("TTFT", fold=None, drop=5),
    Column("TOK/S", fold=None, drop=3),
    Column("PREVIEW", fold=20, drop=1),
)


def ls(args: argparse.Namespace) -> int:
    filters = Filters(
        kind=args.kind,
        status=args.status,
        model=args.model,
        owner=args.owner,
        since_ms=args.since,
        until_ms=args.until,
        text=args.search,
        sort=args.sort,
    )
    with inspector(args.db) as ins:
        rows = ins.page(filters, limit=args.limit).rows
    ls_table(Out(), rows)
    return 0


def ls_table(out: Out, rows: Sequence[Summary]) -> None:
    out.table(None, LS_COLUMNS, [_ls_row(s) for s in rows])


def _ls_row(s: Summary) -> tuple[str, ...]:
    tokens = f"{text(s.input_tokens)}→{text(s.output_tokens)}"
    status = s.status + (" (deleted)" if s.deleted else "")
    when = s.created.replace("T", " ")[:19]
    return (
        s.id,
        when,
        status,
        text(s.owner),
        text(s.model),
        tokens,
        ms(s.ttft_ms),
        rate(s.tokens_per_s),
        s.preview,
    )


def show(args: argparse.Namespace) -> int:
    with inspector(args.db) as ins:
        detail = ins.detail(args.id)
        if detail is None:
            raise unknown(args.id, args.db)
        events = ins.timeline(args.id) if args.events else []
    if args.json:
        shown = detail.to_json()
        if args.events:
            shown["events"] = [e.to_json() for e in events]
        print(json.dumps(shown, indent=2, ensure_ascii=False))
        return 0
    out = Out()
    _show_detail(out, detail)
    if args.events:
        out.table(
            "events",
            (Column("SEQ", None), "TIME", Column("+MS", None), Column("TYPE", None), "TEXT"),
            [(e.seq, e.time, e.ms_since_previous, e.type, e.text) for e in events],
        )
    return 0


def _show_detail(out: Out, d: Detail) -> None:
    s, r = d.summary, d.request
    out.pairs(
        f"{s.kind} {s.id}",
        [
            ("status", s.status),
            ("created", s.created),
            ("model", s.model),
            ("owner", s.owner),
            ("background", s.background),
            ("stored", d.store),
            ("deleted", s.deleted),
            ("previous", d.previous_response_id),
            ("replay of", d.replay_of),
            ("finish reason", d.finish_reason),
            ("error", None if d.error is None else f"{d.error['code']}: {d.error['message']}"),
            ("last seq", d.last_seq),
        ],
    )
    sampling = ", ".join(f"{k}={v}" for k, v in r["sampling"].items() if v not in (None, []))
    asked = [("model", r["model"]), ("sampling", sampling), ("instructions", r["instructions"])]
    tools = ", ".join(str(_tool_name(t)) for t in r["tools"]) or None
    settings = [("tools", tools), ("tool choice", _compact(r["tool_choice"]))]
    settings += [("response format", _compact(r["response_format"]))]
    settings += [("metadata", _compact(r["metadata"] or None))]
    out.pairs("request", [*asked, *settings, ("stream", r["stream"])])
    lines = [(i["type"], i["role"], _short(i["text"])) for i in r["input"]]
    out.table("input", ("TYPE", "ROLE", "TEXT"), lines)
    if any(len(i["text"]) > SHORT for i in r["input"]):
        out.line(f"(inputs cut to {SHORT} characters: `omni show --json` has them whole)")
    out.pairs("usage", list(d.usage.items()))
    t = d.timings
    out.pairs(
        "timings",
        [
            ("queued", ms(t["queued_ms"])),
            ("time to first token", ms(t["ttft_ms"])),
            ("decode tokens/s", rate(t["decode_tokens_per_s"])),
            ("total", ms(t["total_ms"])),
        ],
    )
    if d.reasoning:
        out.block("reasoning", d.reasoning)
    if d.tool_calls:
        out.table(
            "tool calls",
            ("NAME", "ARGUMENTS", Column("CALL ID", None)),
            [(c["name"], c["arguments"], c["call_id"]) for c in d.tool_calls],
        )
    out.block("output", d.output_text)


SHORT = 80  # characters of an input's text on `omni show`'s line (--json: whole)


def _short(value: str) -> str:
    """A text on one line, cut to SHORT characters."""
    flat = " ".join(value.split())
    return flat[:SHORT] + ("…" if len(flat) > SHORT else "")


def _tool_name(tool: Any) -> Any:
    """A tool's name, in each API's shape (Chat's under `function`)."""
    if not isinstance(tool, dict):
        return tool
    return tool.get("name") or (tool.get("function") or {}).get("name") or tool.get("type")


def _compact(value: Any) -> str | None:
    if value is None:
        return None
    return _short(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def stats(args: argparse.Namespace) -> int:
    with inspector(args.db) as ins:
        st = ins.stats(since_ms=args.since)
    if args.json:
        print(json.dumps(st.to_json(), indent=2))
        return 0
    _show_stats(Out(), st)
    return 0


def _show_stats(out: Out, st: Stats) -> None:
    out.pairs(
        "all" if st.since_ms is None else f"since {iso(st.since_ms)}",
        [
            ("objects", st.total),
            ("input tokens", st.input_tokens),
            ("output tokens", st.output_tokens),
            ("TTFT p50", ms(st.ttft_ms_p50)),
            ("TTFT p95", ms(st.ttft_ms_p95)),
            ("tokens/s p50", rate(st.tokens_per_s_p50)),
            ("tokens/s p95", rate(st.tokens_per_s_p95)),
        ],
    )
    for name, counts in (("kind", st.by_kind), ("status", st.by_status), ("model", st.by_model)):
        rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        out.table(f"by {name}", (name.upper(), Column("COUNT", None)), rows)


def replay(args: argparse.Namespace) -> int:
    """The bytes `POST` with `stream: true` sent (keep-alives aside), from the stored events."""
    with inspector(args.db) as ins:
        kind = ins.kind(args.id)
        if kind is None:
            raise unknown(args.id, args.db)
        body = _sse(ins, args.id, kind)
    sys.stdout.buffer.write(body)
    sys.stdout.buffer.flush()
    return 0


def _sse(ins: Inspector, object_id: str, kind: str) -> bytes:
    events = ins.events(object_id)
    if kind == "response":
        return b"".join(frame(type_, data, seq) for seq, type_, data in events)
    if kind == MESSAGE:  # Anthropic's frames, as the API sends them (a cancel never is)
        sent = (e for e in events if e[1] != MESSAGE_CANCELLED)
        return b"".join(frame(type_, data, seq) for seq, type_, data in sent)
    options = ((ins.request(object_id) or {}).get("body") or {}).get("stream_options") or {}
    body = chunk_frames(((t, d) for _, t, d in events), bool(options.get("include_usage")))
    ended = bool(events) and events[-1][1] in COMPLETION_ENDS
    return body + DONE_FRAME if ended else body
