"""Query-string parsing with OpenAI-shaped 400s."""

from __future__ import annotations

from quart import request

from omni.errors import InvalidRequest


def int_arg(name: str, default: int, low: int, high: int | None = None) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"'{name}' must be an integer.", param=name) from None
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidRequest(f"'{name}' must be {bounds}.", param=name)
    return value


def bool_arg(name: str) -> bool:
    raw = request.args.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0"):
        raise InvalidRequest(f"'{name}' must be true or false.", param=name)
    return raw in ("true", "1")


def resumed_after(after: int) -> int:
    """Where a stream's replay starts: `starting_after` (`after`, parsed already), else the
    `Last-Event-ID` header, with which EventSource resumes by itself."""
    last_event_id = request.headers.get("last-event-id")
    if request.args.get("starting_after") is not None or last_event_id is None:
        return after
    try:
        return int(last_event_id)
    except ValueError:
        raise InvalidRequest("Last-Event-ID must be an integer.", param="Last-Event-ID") from None


def page_args(default_order: str) -> tuple[str | None, int, str]:
    """`after`, `limit` (1-100, default 20) and `order` of a cursor-paged list."""
    order = request.args.get("order", default_order)
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
    return request.args.get("after"), int_arg("limit", 20, low=1, high=100), order
