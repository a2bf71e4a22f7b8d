"""What the inspector hands out: frozen values with `to_json()` (plain JSON types), the same
for the CLI (`omni ls/show/stats`) and the web inspector."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict

from omni.inspect.folding import ShownCall
from omni.inspect.requests import RequestSummary


def iso(ms: int) -> str:
    """Unix ms → '2026-12-02T07:51:35.815Z', as the SQL views write it."""
    moment = datetime.fromtimestamp(ms // 1000, UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


# What `status` may be, from accepted to an end.
STATUSES = ("queued", "in_progress", "completed", "incomplete", "failed", "cancelled")
# The kinds of object the log holds (a summary's `kind`).
KINDS = (
    "response", "chat.completion", "text_completion", "embedding", "speech", "transcription",
    "image", "message", "conversation",
)  # fmt: skip


@dataclass(frozen=True)
class Summary:
    """One response or completion, as a list shows it."""

    id: str
    kind: str  # one of KINDS
    created: str  # ISO-8601 UTC
    created_ms: int
    status: str  # one of STATUSES
    model: str | None
    input_tokens: int | None  # while running: the prompt's
    output_tokens: int | None  # while running: the tokens sent so far
    ttft_ms: int | None  # None until the first output is committed
    tokens_per_s: float | None  # decode rate; None until it has finished
    preview: str  # a failure's error, else the output's first words, else the input's
    background: bool
    owner: str | None  # the API key's name that created it
    deleted: bool = False
    position: int = 0  # of its accepted request: `recent(before_position=...)` pages by it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TimelineRow:
    """One event of an object's public stream."""

    stream_id: str
    seq: int
    type: str
    time: str  # ISO-8601 UTC
    created_ms: int
    ms_since_previous: int | None  # None for the stream's first event
    text: str | None  # a delta's text, where the event carries one

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Timings(TypedDict):
    """An object's times in ms from its creation, and its decode rate (None: not yet)."""

    load_ms: int | None  # its model's load, which it waited for before it was accepted
    queued_ms: int | None
    ttft_ms: int | None
    decode_tokens_per_s: float | None
    total_ms: int | None


@dataclass(frozen=True)
class Detail:
    """One object whole: its request, usage, timings, output."""

    summary: Summary
    request: RequestSummary  # whole: every input item, tools, tool choice, format, metadata
    usage: dict[str, Any]  # input/output/cached/reasoning tokens
    timings: Timings
    output_text: str
    tool_calls: list[ShownCall] = field(default_factory=list)
    reasoning: str = ""
    error: dict[str, Any] | None = None  # {code, message}
    last_seq: int = -1  # the highest seq of the public stream
    finish_reason: str | None = None  # a completion's; a response's incomplete reason
    previous_response_id: str | None = None
    store: bool = True
    replay_of: str | None = None  # a chat completion served from the replay cache: whose
    refusal: str = ""
    conversation: str | None = None  # the conversation a response's turn belongs to

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary.to_json()}


@dataclass(frozen=True)
class Stats:
    """Counts and percentiles over the objects created since `since_ms` (all when None)."""

    since_ms: int | None
    total: int
    by_status: dict[str, int]
    by_model: dict[str, int]
    by_kind: dict[str, int]
    input_tokens: int
    output_tokens: int
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    tokens_per_s_p50: float | None
    tokens_per_s_p95: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
