"""Who may open a WebSocket: omni.api.gate's rules (the Host, the web origin, the API key),
checked at the upgrade, where Quart runs no `before_request`. A refusal is an HTTP answer
(401, 403) with OpenAI's error body, and no socket is opened.

A page on another site can open a WebSocket to a loopback server (browsers send no CORS
preflight for one, only an Origin), so the Origin check matters here as much as for HTTP."""

from __future__ import annotations

from quart import Quart, g, websocket

from omni.api.gate import Access, credential, host_allowed, host_name, origin_allowed
from omni.errors import Forbidden


def install(app: Quart, access: Access) -> None:
    own = access.own_names()

    @app.before_websocket
    async def gate() -> None:
        headers = websocket.headers
        name = host_name(headers.get("host", ""))
        if name and not host_allowed(name, own, access.allowed_hosts):
            raise Forbidden(
                f"Host '{name}' is not this server's; start it with --allowed-hosts {name} "
                "to answer under that name.",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, headers.get("host", "")):
            if not origin_allowed(origin, access.allowed_origins):
                raise Forbidden(
                    f"Requests from the web origin '{origin}' are not allowed "
                    "(see --allowed-origins).",
                    code="origin_not_allowed",
                )
        g.owner = access.keys.owner(credential(headers))


def _same_origin(origin: str, host: str) -> bool:
    """A page this server served itself: its Origin names the Host the upgrade names (an
    `http://` page opens `ws://` to the same place)."""
    return bool(host) and origin.lower().partition("://")[2].rstrip("/") == host.lower()
