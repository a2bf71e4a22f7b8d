"""The inspector's queries: recent objects, one object whole, its timeline, statistics.

Over a sync SQLAlchemy Connection (the CLI's read-only file, or the server's engine through
`run_sync`), reading the `summaries` projection and the views of migration 0005; on SQLite
or PostgreSQL (omni/inspect/pg_queries.py holds the few queries that differ).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, RowMapping

from omni.inspect import pg_queries, search
from omni.inspect.folding import (
    decode_rate,
    disk_cached,
    json_object,
    object_output,
    preview,
    response_output,
)
from omni.inspect.records import Detail, Stats, Summary, TimelineRow, Timings
from omni.inspect.requests import conversation_of, request_summary
from omni.inspect.search import Cursor, Filters, Page
from omni.inspect.stats import percentile
from omni.vocabulary import PREFILL_PROGRESS

_SUMMARY = (
    "SELECT s.*, t.data AS end_data FROM summaries s"
    " LEFT JOIN events t ON t.position = s.end_position"
)
_TIMELINE_COLUMNS = "stream_id, seq, type, time, created_ms, ms_since_previous, text"


class Inspector:
    """Reads of the log for people: every read keeps to `owner`'s objects when one is given."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self._postgres = conn.dialect.name == "postgresql"

    def recent(
        self,
        status: str | None = None,
        model: str | None = None,
        since_ms: int | None = None,
        limit: int = 50,
        owner: str | None = None,
        before_position: int | None = None,
        kind: str | None = None,
    ) -> list[Summary]:
        """Newest first, `limit` of them: `page()` with the filters most readers need."""
        filters = Filters(kind=kind, status=status, model=model, since_ms=since_ms)
        after = None if before_position is None else Cursor(0, before_position)
        return self.page(filters, limit, scope=owner, after=after).rows

    def page(
        self,
        filters: Filters,
        limit: int = 50,
        scope: str | None = None,
        after: Cursor | None = None,
    ) -> Page:
        """`limit` objects that match `filters`, in its sort, after `after`; of `scope`'s
        objects only when one is given (an API key's)."""
        where, order, args = search.where(filters, self._postgres, scope, after)
        # The page first, then its ends joined: not every row's end read to sort them.
        page = f"SELECT s.*, {search.sort_key(filters)} FROM summaries s {where} {order}"
        query = f"SELECT s.*, t.data AS end_data FROM ({page} LIMIT :limit) s"
        query += f" LEFT JOIN events t ON t.position = s.end_position {order}"
        rows = self.conn.execute(text(query), {**args, "limit": limit + 1}).mappings().all()
        more = len(rows) > limit
        last = rows[limit - 1] if more else None
        return Page(
            rows=[self._summary(row) for row in rows[:limit]],
            next_cursor=None if last is None else Cursor(int(last["sort_key"]), last["position"]),
        )

    def detail(self, object_id: str, owner: str | None = None) -> Detail | None:
        row = self._row(object_id, owner)
        if row is None:
            return None
        kind = row["kind"]
        events = self.events(object_id)
        request = self.request(object_id) or {}
        output = object_output(kind, [(t, d) for _, t, d in events], request)
        error = None
        if row["error_code"] is not None or row["error_message"] is not None:
            error = {"code": row["error_code"], "message": row["error_message"]}
        return Detail(
            summary=self._summary(row, output.text),
            request=request_summary(kind, request),
            usage={
                "input_tokens": row["input_tokens"],
                "output_tokens": row["output_tokens"],
                "cached_tokens": row["cached_tokens"],
                # of those, what the prefix cache read from disk (the rest: from memory)
                "disk_cached_tokens": disk_cached([(t, d) for _, t, d in events]),
                "reasoning_tokens": row["reasoning_tokens"],
            },
            timings=_timings(row, request.get("load_ms")),
            output_text=output.text,
            tool_calls=output.tool_calls,
            reasoning=output.reasoning,
            refusal=output.refusal,
            error=error,
            last_seq=events[-1][0] if events else -1,
            finish_reason=row["finish_reason"] or row["incomplete_reason"],
            previous_response_id=row["previous_response_id"],
            store=bool(row["store"]),
            replay_of=row["mirror_of"],
            conversation=conversation_of(request),
        )

    def timeline(
        self, object_id: str, after_seq: int = -1, owner: str | None = None
    ) -> list[TimelineRow]:
        """The object's public stream after `after_seq`, in seq order ([] for an unknown id)."""
        if self._row(object_id, owner) is None:
            return []
        query = f"SELECT {_TIMELINE_COLUMNS} FROM timeline"
        query += " WHERE stream_id = :id AND seq > :after ORDER BY seq"
        rows = self.conn.execute(text(query), {"id": object_id, "after": after_seq}).mappings()
        return [TimelineRow(**row) for row in rows]

    def stats(self, since_ms: int | None = None, owner: str | None = None) -> Stats:
        where, args = _filters(owner=owner, since_ms=since_ms)
        counts = self.conn.execute(
            text(
                "SELECT kind, status, coalesce(model, '?'), count(*), sum(input_tokens),"
                f" sum(output_tokens) FROM summaries s {where} GROUP BY 1, 2, 3"
            ),
            args,
        ).all()
        by_status: dict[str, int] = {}
        by_model: dict[str, int] = {}
        by_kind: dict[str, int] = {}
        for kind, status, model, n, _, _ in counts:
            by_status[status] = by_status.get(status, 0) + n
            by_model[model] = by_model.get(model, 0) + n
            by_kind[kind] = by_kind.get(kind, 0) + n
        # The decode rate as decode_rate() and the views' tokens_per_s compute it. Each list
        # comes as one text: a row object apiece would be garbage the collector walks.
        lists = _LISTS if not self._postgres else pg_queries.LISTS
        ttfts, rates = self.conn.execute(
            text(
                f"{lists} FROM summaries s {where} {'AND' if where else 'WHERE'}"
                " first_token_at IS NOT NULL"
            ),
            args,
        ).one()
        ttft, rate = _numbers(ttfts), _numbers(rates)
        return Stats(
            since_ms=since_ms,
            total=sum(n for *_, n, _, _ in counts),
            by_status=by_status,
            by_model=by_model,
            by_kind=by_kind,
            input_tokens=sum(int(i or 0) for *_, i, _ in counts),  # PostgreSQL: a Decimal
            output_tokens=sum(int(o or 0) for *_, o in counts),
            ttft_ms_p50=percentile(ttft, 50),
            ttft_ms_p95=percentile(ttft, 95),
            tokens_per_s_p50=percentile(rate, 50),
            tokens_per_s_p95=percentile(rate, 95),
        )

    # Raw reads, for `omni replay` and `omni tail`.

    def events(self, stream_id: str) -> list[tuple[int, str, str]]:
        """A stream's (seq, type, data), in seq order."""
        rows = self.conn.execute(
            text("SELECT seq, type, data FROM events WHERE stream_id = :s ORDER BY seq"),
            {"s": stream_id},
        )
        return [(int(seq), str(type_), str(data)) for seq, type_, data in rows]

    def request(self, object_id: str) -> dict[str, Any] | None:
        """The object's accepted request, as stored."""
        row = self.conn.execute(
            text(
                "SELECT data FROM events WHERE stream_id = :s AND seq = 0"
                " AND type = 'omni.request.accepted'"
            ),
            {"s": f"{object_id}/request"},
        ).first()
        return json_object(row[0]) if row is not None else None

    def kind(self, object_id: str, owner: str | None = None) -> str | None:
        row = self._row(object_id, owner)
        return None if row is None else str(row["kind"])

    def since(
        self, position: int, object_id: str | None = None, limit: int = 500
    ) -> list[tuple[int, TimelineRow]]:
        """Events committed after `position` (of one object's streams, or all), in order."""
        where = "position > :p"
        if object_id is not None:
            where += " AND stream_id IN (:id, :id || '/request', :id || '/progress')"
        query = f"SELECT position, {_TIMELINE_COLUMNS} FROM timeline WHERE {where}"
        query += " ORDER BY position LIMIT :n"
        rows = self.conn.execute(text(query), {"p": position, "id": object_id, "n": limit})
        found = [
            (int(r["position"]), TimelineRow(**{k: r[k] for k in r.keys() if k != "position"}))
            for r in rows.mappings()
        ]
        return [(at, self._said(row)) for at, row in found]

    def _said(self, row: TimelineRow) -> TimelineRow:
        """A prefill's progress with its figures as its text ("384/1500 tokens fed")."""
        if row.type != PREFILL_PROGRESS:
            return row
        query = "SELECT data FROM events WHERE stream_id = :s AND seq = :q"
        said = json.loads(
            self.conn.execute(text(query), {"s": row.stream_id, "q": row.seq}).scalar_one()
        )
        return replace(row, text=f"{said['fed']}/{said['total']} tokens fed")

    def progress(self, object_id: str, owner: str | None = None) -> dict[str, int] | None:
        """A long prefill's latest progress, {fed, total} tokens (None: none recorded)."""
        if self._row(object_id, owner) is None:
            return None
        query = "SELECT data FROM events WHERE stream_id = :s ORDER BY seq DESC LIMIT 1"
        data = self.conn.execute(text(query), {"s": f"{object_id}/progress"}).scalar()
        if data is None:
            return None
        said = json.loads(data)
        return {"fed": int(said["fed"]), "total": int(said["total"])}

    def last_position(self) -> int:
        return int(
            self.conn.execute(text("SELECT coalesce(max(position), 0) FROM events")).scalar_one()
        )

    def _row(self, object_id: str, owner: str | None) -> RowMapping | None:
        where, args = _filters(owner=owner)
        where = f"{where} AND s.id = :id" if where else "WHERE s.id = :id"
        return (
            self.conn.execute(text(f"{_SUMMARY} {where}"), {**args, "id": object_id})
            .mappings()
            .first()
        )

    def _summary(self, row: RowMapping, output: str | None = None) -> Summary:
        shown, input_tokens, output_tokens = self._progress(row)
        if output is not None:
            shown = output
        if row["status"] == "failed" and row["error_message"] is not None:
            shown = f"{row['error_code'] or 'error'}: {row['error_message']}"  # why, first
        if not shown.strip():
            request = self.request(row["id"]) or {}
            items = request_summary(row["kind"], request)["input"]
            shown = " ".join(i["text"] for i in items if i["role"] in (None, "user"))
        first, created = row["first_token_at"], row["created_at"]
        return Summary(
            id=row["id"],
            kind=row["kind"],
            created=row["created"],
            created_ms=created,
            status=row["status"],
            model=row["model"],
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            ttft_ms=None if first is None else first - created,
            tokens_per_s=decode_rate(row["output_tokens"], first, row["finished_at"]),
            preview=preview(shown),
            background=bool(row["background"]),
            owner=row["owner"],
            deleted=bool(row["deleted"]),
            position=row["position"],
        )

    def _progress(self, row: RowMapping) -> tuple[str, int | None, int | None]:
        """The output and its input and output tokens. Usage is written only with the end:
        without it (running, or ended with no usage: a failure) the prompt's tokens come from
        the accepted request and the output's are the deltas sent, one a token (the few such
        streams are counted here, rather than every delta's trigger keeping a count)."""
        usage = row["input_tokens"], row["output_tokens"]
        known = None not in usage
        if known and row["kind"] == "response" and row["end_position"] is not None:
            ended = json_object(row["end_data"] or "{}").get("response") or {}
            return response_output(ended)[0], *usage
        if row["kind"] in ("speech", "image"):  # not kept: the list shows what was asked
            return "", *usage
        if row["kind"] in ("transcription", "conversation"):  # folded from their streams
            pairs = [(t, d) for _, t, d in self.events(row["id"])]
            return object_output(row["kind"], pairs, {})[0], *usage
        if row["kind"] == "embedding":  # no output; unfinished, its request's tokens
            if usage[0] is not None:
                return "", usage[0], None
            return "", (self.request(row["id"]) or {}).get("prompt_tokens"), None
        so_far = pg_queries.SO_FAR if self._postgres else _SO_FAR
        query = so_far[row["kind"] if row["kind"] in ("response", "message") else "completion"]
        shown, prompt, sent = self.conn.execute(text(query), {"s": row["id"]}).one()
        if known:
            return str(shown or ""), *usage
        return str(shown or ""), prompt if usage[0] is None else usage[0], int(sent)


# A stream's text and tokens so far, through its own rows (`+type`: not the index of every
# event of that type), and its prompt's tokens. A token's text may be held back (half a
# character, a tool call not yet whole): it is counted once it is sent.
_PROMPT = """(SELECT json_extract(r.data, '$.prompt_tokens') FROM events r
    WHERE r.stream_id = :s || '/request' AND r.seq = 0 AND json_valid(r.data))"""
_RESPONSE_SO_FAR = f"""SELECT group_concat(CASE WHEN type = 'response.output_text.delta'
    THEN json_extract(data, '$.delta') END, ''), {_PROMPT}, count(*) FROM events
    WHERE stream_id = :s
    AND +type IN ('response.output_text.delta', 'response.reasoning_text.delta')"""
_CONTENT = "json_extract(data, '$.choices[0].delta.content')"
_REASONING = "json_extract(data, '$.choices[0].delta.reasoning_content')"
_TEXT = "json_extract(data, '$.choices[0].text')"
# The role chunk's content is "": it is no token.
_COMPLETION_SO_FAR = f"""SELECT group_concat(coalesce({_CONTENT}, {_TEXT}), ''), {_PROMPT},
    count(nullif(coalesce({_CONTENT}, {_REASONING}, {_TEXT}), '')) FROM events
    WHERE stream_id = :s AND +type IN ('chat.completion.chunk', 'text_completion.chunk')"""
# A message's text blocks' deltas; each text, thinking or tool call delta is a token sent.
_MESSAGE_SO_FAR = f"""SELECT group_concat(json_extract(data, '$.delta.text'), ''), {_PROMPT},
    count(*) FROM events WHERE stream_id = :s AND +type = 'content_block_delta'
    AND json_extract(data, '$.delta.type') != 'signature_delta'"""
_SO_FAR = {
    "response": _RESPONSE_SO_FAR,
    "completion": _COMPLETION_SO_FAR,
    "message": _MESSAGE_SO_FAR,
}
_LISTS = (
    "SELECT group_concat(first_token_at - created_at), group_concat(CASE WHEN"
    " output_tokens > 1 AND finished_at > first_token_at THEN round((output_tokens"
    " - 1) * 1000.0 / (finished_at - first_token_at), 1) END)"
)


def _filters(**given: Any) -> tuple[str, dict[str, Any]]:
    """A WHERE clause over `summaries s` for the filters given (None: no filter)."""
    clauses = {
        "owner": "s.owner = :owner",
        "since_ms": "s.created_at >= :since_ms",
    }
    args = {k: v for k, v in given.items() if v is not None}
    where = " AND ".join(clauses[k] for k in args)
    return (f"WHERE {where}" if where else ""), args


def _timings(row: RowMapping, load_ms: int | None = None) -> Timings:
    created, started = row["created_at"], row["started_at"]
    first, end = row["first_token_at"], row["finished_at"]
    return {
        "load_ms": load_ms or None,
        "queued_ms": None if started is None else started - created,
        "ttft_ms": None if first is None else first - created,
        "decode_tokens_per_s": decode_rate(row["output_tokens"], first, end),
        "total_ms": None if end is None else end - created,
    }


def _numbers(joined: str | None) -> list[float]:
    """group_concat's comma-separated numbers (None for none)."""
    return [float(n) for n in joined.split(",")] if joined else []
