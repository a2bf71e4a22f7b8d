"""The dashboard's figures over time: the log's rows (the `summaries` projection) in buckets
of `step` over a window up to now, counted and summed in SQL on SQLite or PostgreSQL.

Arrivals count when a request was created; what only its end tells (errors, tokens, time to
first token, decode rate) counts when it ended. The percentiles are taken here, in Python,
over each bucket's values, which SQL hands over as one text per bucket."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, CursorResult

from omni.inspect.stats import percentile

# The windows the dashboard offers, and the step each gets unless one is asked for.
WINDOWS = {"15m": 900, "1h": 3_600, "6h": 21_600, "24h": 86_400, "7d": 604_800}
STEPS = {"15m": 15, "1h": 60, "6h": 300, "24h": 900, "7d": 3_600}
MAX_BUCKETS = 1_440
# A generation's end is looked for among rows created at most this long before the window:
# the bound lets the created_at index read the window rather than the whole table.
LONGEST_MS = 86_400_000


@dataclass(frozen=True)
class Span:
    """Buckets of `step_ms` from `start_ms` (a multiple of the step: a poll a moment later
    keeps the same buckets) to `end_ms`, now (exclusive)."""

    start_ms: int
    end_ms: int
    step_ms: int

    @classmethod
    def ending(cls, now_ms: int, window_s: int, step_s: int) -> Span:
        step = step_s * 1000
        return cls((now_ms - window_s * 1000) // step * step, now_ms + 1, step)

    @property
    def buckets(self) -> int:
        return -(-(self.end_ms - self.start_ms) // self.step_ms)

    @property
    def seconds(self) -> float:
        """A bucket's length, what its rates are over (the last one's too: it is still
        filling, and reads low rather than wild after its first moment)."""
        return self.step_ms / 1000


@dataclass(frozen=True)
class Trend:
    span: Span
    series: dict[str, list[float | None]]  # each of SERIES, a value per bucket
    models: list[str]  # the models of the window's rows, for the filter
    owners: list[str]  # the keys of the window's rows

    def to_json(self) -> dict[str, Any]:
        span = self.span
        times = [(span.start_ms + i * span.step_ms) // 1000 for i in range(span.buckets)]
        return {
            "object": "inspect.trends",
            "start_ms": span.start_ms,
            "end_ms": span.end_ms,
            "step_s": span.step_ms // 1000,
            "time": times,
            **self.series,
            "models": self.models,
            "owners": self.owners,
        }


SERIES = (
    "requests_per_min", "errors_per_min", "input_tokens_per_s", "output_tokens_per_s",
    "ttft_ms_p50", "ttft_ms_p95", "decode_tokens_per_s_p50", "decode_tokens_per_s_p95",
)  # fmt: skip

_BUCKET = "CAST((s.{at} - CAST(:start AS BIGINT)) / CAST(:step AS BIGINT) AS INTEGER)"
_ARRIVALS = f"SELECT {_BUCKET.format(at='created_at')}, count(*) FROM summaries s"
_TTFT = "s.first_token_at - s.created_at"
_RATE = (
    "CASE WHEN s.output_tokens > 1 AND s.finished_at > s.first_token_at THEN round((s.output_tokens"
    " - 1) * 1000.0 / (s.finished_at - s.first_token_at), 1) END"
)  # as reading.py's stats and the views' tokens_per_s compute it
_ENDS = {
    "sqlite": f"group_concat({_TTFT}), group_concat({_RATE})",
    "postgresql": f"string_agg(({_TTFT})::text, ','), string_agg(({_RATE})::text, ',')",
}


class Trends:
    def __init__(self, conn: Connection):
        self.conn = conn

    def read(
        self,
        span: Span,
        model: str | None = None,
        owner: str | None = None,
        scope: str | None = None,
    ) -> Trend:
        """The window's figures of `model`'s rows (None: every model's) and `owner`'s (None:
        every key's), among those `scope` may see (its own; None: every key's)."""
        where, args = _filters(model=model, owner=owner if scope is None else scope)
        args |= {"start": span.start_ms, "end": span.end_ms, "step": span.step_ms}
        series: dict[str, list[float | None]] = {  # a count of none is 0, its median none
            name: [None if name[-4:-2] == "_p" else 0.0] * span.buckets for name in SERIES
        }
        for b, count in self._arrivals(where, args):
            series["requests_per_min"][b] = count * 60 / span.seconds
        for b, failed, tokens_in, tokens_out, ttfts, rates in self._ends(where, args, span):
            series["errors_per_min"][b] = int(failed) * 60 / span.seconds
            series["input_tokens_per_s"][b] = int(tokens_in or 0) / span.seconds  # PG: Decimal
            series["output_tokens_per_s"][b] = int(tokens_out or 0) / span.seconds
            for name, values in (("ttft_ms", ttfts), ("decode_tokens_per_s", rates)):
                numbers = _numbers(values)
                series[f"{name}_p50"][b] = percentile(numbers, 50)
                series[f"{name}_p95"][b] = percentile(numbers, 95)
        # What the filters may offer: whatever the scope sees, whichever is chosen.
        models, owners = (self._distinct(column, span, scope) for column in ("model", "owner"))
        return Trend(span, series, models, owners)

    def _arrivals(self, where: str, args: dict[str, Any]) -> CursorResult[int, int]:
        """Each bucket's requests, by when they were created."""
        return self.conn.execute(
            text(
                f"{_ARRIVALS} WHERE s.created_at >= :start AND s.created_at < :end{where}"
                " AND s.kind != 'conversation' GROUP BY 1"
            ),
            args,
        )

    def _ends(
        self, where: str, args: dict[str, Any], span: Span
    ) -> CursorResult[int, int, Any, Any, str | None, str | None]:
        """Each bucket's failures, tokens in and out, and lists of time to first token and
        decode rate, by when the requests ended."""
        return self.conn.execute(
            text(
                f"SELECT {_BUCKET.format(at='finished_at')},"
                " sum(CASE WHEN s.status = 'failed' THEN 1 ELSE 0 END), sum(s.input_tokens),"
                f" sum(s.output_tokens), {_ENDS[self.conn.dialect.name]} FROM summaries s"
                " WHERE s.created_at >= :reach AND s.created_at < :end"
                f" AND s.finished_at >= :start AND s.finished_at < :end{where}"
                " AND s.kind != 'conversation' GROUP BY 1"
            ),
            {**args, "reach": span.start_ms - LONGEST_MS},
        )

    def _distinct(self, column: str, span: Span, owner: str | None) -> list[str]:
        where, args = _filters(owner=owner)
        rows = self.conn.execute(
            text(
                f"SELECT DISTINCT s.{column} FROM summaries s WHERE s.created_at >= :start"
                f" AND s.created_at < :end AND s.{column} IS NOT NULL{where}"
            ),
            {**args, "start": span.start_ms, "end": span.end_ms},
        )
        return sorted(str(value) for (value,) in rows)


def _filters(**given: str | None) -> tuple[str, dict[str, Any]]:
    """` AND …` for each filter given (None: none)."""
    args = {k: v for k, v in given.items() if v is not None}
    return "".join(f" AND s.{k} = :{k}" for k in args), args


def _numbers(joined: str | None) -> list[float]:
    return [float(n) for n in joined.split(",")] if joined else []
