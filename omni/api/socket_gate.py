"""Who may open a WebSocket: omni.api.gate's rules (the Host, the web origin, the API key),
checked at the upgrade, where Quart runs no `before_request`. A refusal is an HTTP answer
(401, 403) with OpenAI's error body, and no socket is opened.

A page on another site can open a WebSocket to a loopback server (browsers send no CORS
preflight for one, only an Origin), so the Origin check matters here as much as for HTTP."""

from __future__ import annotations

from quart import Quart, g, websocket

from omni.api.gate import Access, Hosts, check_origin, credential


def install(app: Quart, access: Access) -> None:
    hosts = Hosts(access)

    @app.before_websocket
    async def gate() -> None:
        headers = websocket.headers
        hosts.check(headers.get("host", ""))
        check_origin(headers, access)
        g.owner = access.keys.owner(credential(headers))
        g.admin = g.owner in access.keys.admins
