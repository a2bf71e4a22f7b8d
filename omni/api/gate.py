"""Who may reach the API: the Host a request names, the web origin it comes from, its API
key, its body's size and type. One check before every request; CORS headers after.

Browsers are the reason for most of it: a page on another site can make a visitor's browser
send a form (a `text/plain` or form body, no preflight) or, through DNS rebinding, reach a
loopback server under the attacker's own host name. So a JSON API takes only JSON bodies, and
a request naming a host that is not this server's is refused.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

from quart import Quart, Response, g, request
from werkzeug.datastructures import Headers
from werkzeug.exceptions import HTTPException

from omni.api.access import note, open_path
from omni.api.keys import KeyRing
from omni.errors import Forbidden, PayloadTooLarge, UnsupportedMediaType

ALLOW_HEADERS = ("authorization", "content-type", "last-event-id", "x-api-key")
# The OpenAI and Anthropic SDKs for JavaScript send these too; a browser page using them
# needs them allowed.
ALLOW_HEADER_PREFIXES = ("x-stainless-", "openai-", "anthropic-")
EXPOSE_HEADERS = "x-request-id, x-omni-cache"
MAX_HOSTS = 256  # Host headers whose verdict is kept (any beyond are checked each time)
ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"


@dataclass(frozen=True)
class Access:
    keys: KeyRing = field(default_factory=KeyRing)
    allowed_origins: tuple[str, ...] = ()  # "*": any
    allowed_hosts: tuple[str, ...] = ()  # beyond this machine's names and any IP address
    max_body_bytes: int = 16 * 1024 * 1024
    host: str = "127.0.0.1"  # the address the server listens on

    def own_names(self) -> frozenset[str]:
        names = {self.host, "localhost", socket.gethostname(), socket.getfqdn()}
        return frozenset(n.lower() for n in names if n)


def host_name(header: str) -> str:
    """The name in a Host header, without its port ("[::1]:80" -> "::1")."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def host_allowed(name: str, own: frozenset[str], allowed: tuple[str, ...]) -> bool:
    """An IP address cannot be rebound to another site, so any is fine; a name must be one
    of this machine's, under .localhost, or allowed (`*`, `name`, `*.domain`)."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    if name in own or name.endswith(".localhost") or "*" in allowed:
        return True
    return any(
        name == a.lower() or (a.startswith("*.") and name.endswith(a[1:].lower())) for a in allowed
    )


def origin_allowed(origin: str, allowed: tuple[str, ...]) -> bool:
    return "*" in allowed or origin.rstrip("/").lower() in {a.rstrip("/").lower() for a in allowed}


def install(app: Quart, access: Access) -> None:
    app.config["MAX_CONTENT_LENGTH"] = access.max_body_bytes  # a chunked body is cut there too
    hosts = Hosts(access)

    @app.before_request
    async def gate() -> Response | None:
        hosts.check(request.headers.get("host", ""))
        check_origin(request.headers, access)
        if request.method == "OPTIONS" and "access-control-request-method" in request.headers:
            return _preflight()
        g.owner, g.admin = None, False
        if open_path(request.path):
            return None
        g.owner = owner = access.keys.owner(credential(request.headers))
        g.admin = owner in access.keys.admins
        if owner is not None:
            note(key=owner)
        _check_body(access)
        return None

    @app.after_request
    async def cors(response: Response) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and origin_allowed(origin, access.allowed_origins):
            response.headers["access-control-allow-origin"] = origin
            response.headers["access-control-expose-headers"] = EXPOSE_HEADERS
            response.headers.add("vary", "Origin")
        if response.status_code == 401:
            response.headers["www-authenticate"] = "Bearer"
        if response.status_code >= 400:
            await _finish_body(response, access.max_body_bytes)
        return response


def credential(headers: Headers) -> str | None:
    """A request's `Authorization`, else its `x-api-key` (Anthropic's SDKs send the key
    there) as a bearer credential: one key set answers both APIs (and the WebSocket's
    upgrade, omni.api.socket_gate)."""
    authorization = headers.get("authorization")
    api_key = headers.get("x-api-key")
    if authorization is None and api_key is not None:
        return f"Bearer {api_key}"
    return authorization


class Hosts:
    """Whether a Host header names this server, remembered: a server hears few names, and
    parsing one as an IP address on every request costs more than the rest of the check."""

    def __init__(self, access: Access) -> None:
        self._own = access.own_names()
        self._allowed_hosts = access.allowed_hosts
        self._known: dict[str, bool] = {}  # Host header -> allowed

    def allowed(self, header: str) -> bool:
        allowed = self._known.get(header)
        if allowed is None:
            name = host_name(header)
            allowed = not name or host_allowed(name, self._own, self._allowed_hosts)
            if len(self._known) < MAX_HOSTS:
                self._known[header] = allowed
        return allowed

    def check(self, header: str) -> None:
        if not self.allowed(header):
            name = host_name(header)
            raise Forbidden(
                f"Host '{name}' is not this server's; start it with --allowed-hosts {name} "
                "to answer under that name.",
                code="host_not_allowed",
            )


def check_origin(headers: Headers, access: Access) -> None:
    """A 403 for a web origin this server does not answer (a request's, or a WebSocket
    upgrade's: omni.api.socket_gate)."""
    origin = headers.get("origin")
    if (
        origin is not None
        and not _same_origin(origin, headers.get("host", ""))
        and not origin_allowed(origin, access.allowed_origins)
    ):
        raise Forbidden(
            f"Requests from the web origin '{origin}' are not allowed (see --allowed-origins).",
            code="origin_not_allowed",
        )


def _check_body(access: Access) -> None:
    """A 413 for a body declared too large, a 415 for one neither JSON nor an audio upload."""
    length = request.content_length
    if length is not None and length > access.max_body_bytes:
        raise PayloadTooLarge(
            f"The request body is {length} bytes; this server takes "
            f"at most {access.max_body_bytes} (see --max-body-mb)."
        )
    if request.method in ("POST", "PUT", "PATCH") and _has_body(length):
        mimetype = request.mimetype
        if mimetype != "application/json" and not _upload(mimetype):
            raise UnsupportedMediaType(
                "The request body must be JSON, sent with 'Content-Type: application/json'"
                f" (got {mimetype or 'no content type'!r})."
            )


def _upload(mimetype: str) -> bool:
    """An audio file, sent as OpenAI's audio endpoints take it: a multipart form."""
    return mimetype == "multipart/form-data" and "/audio/" in request.path


def _same_origin(origin: str, host: str) -> bool:
    """A page this server served itself (its Origin names the Host the request names)."""
    return bool(host) and origin.lower().partition("://")[2].rstrip("/") == host.lower()


async def _finish_body(response: Response, limit: int) -> None:
    """A request refused before its body was read: read the rest, so the connection can carry
    the client's next request (HTTP/1.1 cannot start one with a body half-sent; Hypercorn
    would drop the connection under it), or, for a body too large to read, say the
    connection closes. An HTTP/2 body that says no length is read too: Hypercorn 0.18 fails
    the whole connection on a DATA frame for a stream it has already answered and closed."""
    length = request.content_length
    if request.method not in ("POST", "PUT", "PATCH") or not _has_body(length):
        return
    if (length is None or length <= limit) and response.status_code != 413:
        try:
            await request.get_data(cache=True)
            return
        except HTTPException:  # it will not come (a timeout, or longer than it said)
            pass
    if request.http_version.startswith("1"):  # HTTP/2 ends the stream alone
        response.headers["connection"] = "close"


def _has_body(length: int | None) -> bool:
    """HTTP/1.1 says a body's length (`length`, its Content-Length) or that it is chunked;
    HTTP/2 need say neither."""
    if length is not None:
        return length > 0
    chunked = "chunked" in request.headers.get("transfer-encoding", "").lower()
    return chunked or not request.http_version.startswith("1")


def _preflight() -> Response:
    """A CORS preflight from an allowed origin (the gate refused the others)."""
    asked = [
        h.strip().lower()
        for h in request.headers.get("access-control-request-headers", "").split(",")
    ]
    headers = [h for h in asked if h in ALLOW_HEADERS or h.startswith(ALLOW_HEADER_PREFIXES)]
    response = Response("", status=204)
    response.headers["access-control-allow-methods"] = ALLOW_METHODS
    response.headers["access-control-allow-headers"] = ", ".join(
        dict.fromkeys([*ALLOW_HEADERS, *headers])
    )
    response.headers["access-control-max-age"] = "600"
    return response


def owner() -> str | None:
    """Who is asking: the name of the request's API key (None: a server without keys). An
    AttributeError, not everyone's view, where the gate did not run."""
    return g.owner  # type: ignore[no-any-return]


def viewer() -> str | None:
    """Whose rows the inspector's reads may show: the request's key's own, or every key's
    (None) for an admin key or a server without keys."""
    return None if g.admin else owner()


def is_admin() -> bool:
    """Whether the request's key may see every key's rows (a server without keys: yes)."""
    return bool(g.admin) or g.owner is None
