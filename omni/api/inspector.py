"""The web inspector: `GET /inspect` (recent responses and chat completions, live),
`GET /inspect/<id>` (one of them) and `GET /inspect/dashboard` (trends over a window), static
pages that read the JSON under /inspect/api/.

The pages and their scripts carry no data, so they are served open (a browser navigating
cannot send a bearer header); the JSON is behind the API key like every other read, and
shows a key only what it created (an admin key, `admin` in the key file: every key's). The
page asks for the key on a 401 and sends it as `Authorization: Bearer` on every fetch
(omni/api/static/inspect/common.js).
"""

from __future__ import annotations

import time
from functools import cache
from pathlib import Path
from typing import Any

from quart import Blueprint, Response, jsonify, request

from omni.api.current import current_server
from omni.api.gate import is_admin, owner, viewer
from omni.api.query import int_arg
from omni.errors import InvalidRequest, NotFound
from omni.events.backends import LogStore
from omni.inspect import KINDS, STATUSES, Inspector
from omni.inspect.search import SORTS, Cursor, Filters, moment
from omni.inspect.trends import MAX_BUCKETS, STEPS, WINDOWS, Span, Trends
from omni.inspect.turns import turns as read_turns

bp = Blueprint("inspector", __name__)

STATIC = Path(__file__).resolve().parent / "static" / "inspect"
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
# Everything the pages load comes from here; the model's text is only ever set as text, and
# the policy keeps any markup that slipped in from running scripts or loading anything.
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@cache
def _file(name: str) -> bytes | None:
    """A file of the package's static folder (by bare name: no path reaches elsewhere)."""
    if "/" in name or "\\" in name or name.startswith(".") or Path(name).suffix not in TYPES:
        return None
    path = STATIC / name
    return path.read_bytes() if path.is_file() else None


def _static(name: str) -> Response:
    body = _file(name)
    if body is None:
        raise NotFound(f"No inspector file '{name}'.")
    response = Response(body, content_type=TYPES[Path(name).suffix])
    response.headers["content-security-policy"] = POLICY
    response.headers["x-content-type-options"] = "nosniff"
    response.headers["cache-control"] = "no-cache"
    return response


def _store() -> LogStore:
    return current_server().store


def _fresh(body: dict[str, Any]) -> Response:
    response = jsonify(body)
    response.headers["cache-control"] = "no-store"  # live: each poll reads the log again
    return response


@bp.get("/inspect")
@bp.get("/inspect/")
async def list_page() -> Response:
    return _static("index.html")


@bp.get("/inspect/dashboard")
async def dashboard_page() -> Response:
    return _static("dashboard.html")


@bp.get("/inspect/<object_id>")
async def object_page(object_id: str) -> Response:
    return _static("object.html")


@bp.get("/inspect/static/<name>")
async def static_file(name: str) -> Response:
    return _static(name)


@bp.get("/inspect/api/whoami")
async def whoami() -> Response:
    """The key the page sends: its name, and whether it sees every key's rows."""
    return _fresh({"owner": owner(), "admin": is_admin()})


@bp.get("/inspect/api/recent")
async def recent() -> Response:
    """A page of the log's objects: filtered (kind, status, model, owner, since, until, q:
    words of the input or output), sorted, and paged by `cursor` (each page's next_cursor)."""
    who = viewer()
    limit = int_arg("limit", 50, low=1, high=500)
    filters = _list_filters()
    cursor = request.args.get("cursor") or None
    after = None if cursor is None else Cursor.decode(cursor)
    page = await _store().run_read(
        lambda c: Inspector(c).page(filters, limit, scope=who, after=after)
    )
    return _fresh(page.to_json())


def _list_filters() -> Filters:
    """The list's filters from the query string (empty: none), a 400 for a value it can't be."""
    given = {k: request.args.get(k) or None for k in _LIST_ARGS}
    for name, allowed in (("kind", KINDS), ("status", STATUSES), ("sort", tuple(SORTS))):
        if given[name] is not None and given[name] not in allowed:
            raise InvalidRequest(f"'{name}' must be one of {', '.join(allowed)}.", param=name)
    since, until = given["since"], given["until"]
    return Filters(
        kind=given["kind"],
        status=given["status"],
        model=given["model"],
        owner=given["owner"],
        since_ms=None if since is None else moment(since, "since"),
        until_ms=None if until is None else moment(until, "until"),
        text=given["q"],
        sort=given["sort"] or "newest",
    )


_LIST_ARGS = ("kind", "status", "model", "owner", "since", "until", "q", "sort")


@bp.get("/inspect/api/trends")
async def trends() -> Response:
    """The dashboard's figures over `window` in buckets of `step` seconds, of one `model`
    and (for a key that sees every key's: an admin's, or none) one `owner`; with the
    server's own samples."""
    who = viewer()
    span = _span(int(time.time() * 1000))
    model = request.args.get("model") or None
    chosen = request.args.get("owner") or None  # within what `who` sees
    found = await _store().run_read(
        lambda c: Trends(c).read(span, model=model, owner=chosen, scope=who)
    )
    sampler, ranks = current_server().sampler, current_server().ranks
    last = sampler.samples[-1].models if sampler.samples else ()
    runtime = {
        "since_ms": sampler.started_ms,
        "every_s": sampler.every_s,
        **sampler.series(span.start_ms, span.step_ms, span.buckets, model),
        "loaded_now": [m.model for m in last],
        "ranks": None if ranks is None else ranks.to_json(),
    }
    return _fresh(
        {
            **found.to_json(),
            "window": request.args.get("window", "1h"),
            "scoped_to": who,  # None: this key sees every key's rows, and may choose one
            "runtime": runtime,
        }
    )


def _span(now_ms: int) -> Span:
    """The window and step asked for, as buckets up to now (400s for what has no meaning)."""
    window = request.args.get("window", "1h")
    if window not in WINDOWS:
        raise InvalidRequest(f"'window' must be one of {', '.join(WINDOWS)}.", param="window")
    step = int_arg("step", STEPS[window], low=5)
    if WINDOWS[window] // step > MAX_BUCKETS:
        least = -(-WINDOWS[window] // MAX_BUCKETS)
        raise InvalidRequest(
            f"'step' must be at least {least} seconds for a {window} window.", param="step"
        )
    if step > WINDOWS[window]:
        raise InvalidRequest(f"'step' must be at most the window, {WINDOWS[window]}.", param="step")
    return Span.ending(now_ms, WINDOWS[window], step)


@bp.get("/inspect/api/<object_id>")
async def detail(object_id: str) -> Response:
    who = viewer()
    found = await _store().run_read(lambda c: Inspector(c).detail(object_id, owner=who))
    if found is None:
        raise NotFound(f"No response or completion with id '{object_id}' found.")
    return _fresh(found.to_json())


@bp.get("/inspect/api/<object_id>/progress")
async def progress(object_id: str) -> Response:
    """A long prefill's progress: {fed, total} tokens of its latest chunk, or nulls."""
    who = viewer()

    def read(conn: Any) -> dict[str, Any] | None:
        ins = Inspector(conn)
        if ins.kind(object_id, owner=who) is None:
            return None
        return ins.progress(object_id, owner=who) or {"fed": None, "total": None}

    found = await _store().run_read(read)
    if found is None:
        raise NotFound(f"No response or completion with id '{object_id}' found.")
    return _fresh(found)


@bp.get("/inspect/api/<object_id>/timeline")
async def timeline(object_id: str) -> Response:
    who = viewer()
    after = int_arg("after_seq", -1, low=-1)

    def read(conn: Any) -> list[dict[str, Any]] | None:
        ins = Inspector(conn)
        rows = ins.timeline(object_id, after_seq=after, owner=who)
        if not rows and ins.detail(object_id, owner=who) is None:  # another key's, or none
            return None
        return [row.to_json() for row in rows]

    rows = await _store().run_read(read)
    if rows is None:
        raise NotFound(f"No response or completion with id '{object_id}' found.")
    return _fresh({"object": "list", "data": rows})


@bp.get("/inspect/api/<object_id>/turns")
async def turns(object_id: str) -> Response:
    """The object's chain or conversation, every turn whole, in order (those its key sees)."""
    who = viewer()
    found = await _store().run_read(lambda c: read_turns(Inspector(c), object_id, owner=who))
    if found is None:
        raise NotFound(f"No response or completion with id '{object_id}' found.")
    return _fresh(found.to_json())
