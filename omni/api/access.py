"""One access line per request (logger `omni.access`, level info) and the request counter of
/metrics, kept at the ASGI edge: a streamed answer is logged once its last byte has gone, with
the tokens its terminal event reports. Handlers add what they know with `note`."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from quart import Quart, request

from omni.metrics import Metrics

log = logging.getLogger("omni.access")

# Probes and scrapes: open whatever keys are set (counts and timings only, never a prompt, an id
# or a key, as vLLM has it), and logged at debug: they come every few seconds.
OPEN_PATHS = frozenset({"/health", "/v1/health", "/metrics"})
# The web inspector's pages and scripts: static, no data (that is under /inspect/api/, behind
# the key), so a browser can load them before it has been given the key.
INSPECTOR_PAGES = "/inspect"
INSPECTOR_DATA = "/inspect/api/"


def open_path(path: str) -> bool:
    """Reachable without an API key (the Host and Origin checks still apply)."""
    if path in OPEN_PATHS or path == INSPECTOR_PAGES:
        return True
    return path.startswith(INSPECTOR_PAGES + "/") and not path.startswith(INSPECTOR_DATA)


def quiet(path: str) -> bool:
    """Logged at debug: probes, scrapes and the inspector (its pages poll every second or
    few, and load their files): what an operator's open tab does is not news."""
    return path in OPEN_PATHS or path == INSPECTOR_PAGES or path.startswith(INSPECTOR_PAGES + "/")


FIELDS = "omni.access"  # the ASGI scope's key for this request's fields
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
ORDER = ("id", "input_tokens", "output_tokens", "cache", "request_id")  # then any other
GONE = 499  # nothing was sent: the client went away first (nginx's number for it)


def note(**fields: Any) -> dict[str, Any]:
    """Add to this request's access line; returns its fields, for a streamed body to finish."""
    scope: Any = request.scope  # the ASGI scope: the edge below reads the same dict
    found: dict[str, Any] = scope.setdefault(FIELDS, {})
    found.update(fields)
    return found


def usage_note(usage: dict[str, Any] | None) -> dict[str, Any]:
    """Input and output tokens out of a Responses or a Chat Completions usage object."""
    if not usage:
        return {}
    given = usage.get("input_tokens", usage.get("prompt_tokens"))
    made = usage.get("output_tokens", usage.get("completion_tokens"))
    return {"input_tokens": given, "output_tokens": made}


def terminal_note(data: str) -> dict[str, Any]:
    """The tokens of a stream's last event (a response's terminal event, a usage chunk)."""
    if '"usage"' not in data:
        return {}
    try:
        event = json.loads(data)
    except ValueError:
        return {}
    holder = event.get("response") if isinstance(event.get("response"), dict) else event
    usage = holder.get("usage")
    return usage_note(usage) if isinstance(usage, dict) else {}


def install(app: Quart, metrics: Metrics) -> None:
    @app.before_request
    async def route() -> None:
        rule = request.url_rule
        args = request.view_args or {}
        found = note(route=rule.rule if rule is not None else "unmatched")
        if "response_id" in args or "cid" in args:
            found.setdefault("id", args.get("response_id", args.get("cid")))

    inner = app.asgi_app

    async def asgi_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        started = time.perf_counter()
        fields: dict[str, Any] = {}
        scope[FIELDS] = fields
        status = GONE

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", ()):
                    if name.lower() == b"x-request-id":
                        fields["request_id"] = value.decode("latin-1")
            await send(message)

        try:
            await inner(scope, receive, sending)
        finally:
            ms = (time.perf_counter() - started) * 1000
            method = scope["method"] if scope["method"] in METHODS else "other"
            metrics.requests.labels(fields.pop("route", "unmatched"), method, str(status)).inc()
            path = scope["path"].encode("unicode_escape").decode("ascii")  # no forged lines
            line = {"method": scope["method"], "path": path, "status": status}
            line["ms"] = round(ms, 1)
            known = [k for k in ORDER if k in fields] + [k for k in fields if k not in ORDER]
            line.update((k, fields[k]) for k in known if fields[k] is not None)
            level = logging.DEBUG if quiet(scope["path"]) else logging.INFO
            log.log(level, format_line(line), extra={"access": line})

    app.asgi_app = asgi_app  # type: ignore[method-assign]


def format_line(line: dict[str, Any]) -> str:
    """`POST /v1/responses 200 41.2ms id=resp_… input_tokens=9 output_tokens=16 …`"""
    head = f"{line['method']} {line['path']} {line['status']} {line['ms']}ms"
    rest = " ".join(
        f"{k}={v}" for k, v in line.items() if k not in ("method", "path", "status", "ms")
    )
    return f"{head} {rest}" if rest else head
