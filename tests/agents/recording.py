"""An ASGI middleware that keeps every HTTP exchange and WebSocket connection, to see what an
agent CLI sent and got back (with store:false the server keeps nothing once the stream is
read)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Asgi = Callable[..., Awaitable[None]]


@dataclass
class Exchange:
    method: str
    path: str
    query: str = ""
    headers: dict[str, str] = field(default_factory=dict)  # the request's, names lower case
    body: bytearray = field(default_factory=bytearray)
    status: int | None = None  # a WebSocket's: 101 once accepted
    response: bytearray = field(default_factory=bytearray)
    websocket: bool = False
    received: list[str] = field(default_factory=list)  # a WebSocket's messages, from the client
    sent: list[str] = field(default_factory=list)  # and to it


class Recording:
    def __init__(self, app: Asgi):
        self.app = app
        self.exchanges: list[Exchange] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            return await self._websocket(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = scope.get("query_string", b"").decode("latin-1")
        exchange = Exchange(scope["method"], scope["path"], query, headers)
        self.exchanges.append(exchange)

        async def recorded_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                exchange.body += message.get("body", b"")
            return message  # type: ignore[no-any-return]

        async def recorded_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
            elif message["type"] == "http.response.body":
                exchange.response += message.get("body", b"")
            await send(message)

        await self.app(scope, recorded_receive, recorded_send)

    async def _websocket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = scope.get("query_string", b"").decode("latin-1")
        exchange = Exchange("GET", scope["path"], query, headers, websocket=True)
        self.exchanges.append(exchange)

        async def recorded_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "websocket.receive":
                exchange.received.append(message.get("text") or message["bytes"].decode())
            return message  # type: ignore[no-any-return]

        async def recorded_send(message: dict[str, Any]) -> None:
            if message["type"] == "websocket.accept":
                exchange.status = 101
            elif message["type"] == "websocket.http.response.start":
                exchange.status = message["status"]
            elif message["type"] == "websocket.send":
                exchange.sent.append(message.get("text") or message["bytes"].decode())
            await send(message)

        await self.app(scope, recorded_receive, recorded_send)

    def responses(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.path != "/health"]
