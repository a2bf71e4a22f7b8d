"""The Server an app routes to (omni.server), typed: handlers ask current_server()."""

from __future__ import annotations

from quart import Quart, current_app

from omni.server import Server

_KEY = "OMNI"  # where the app keeps it, from before serving until it closes


def opened(app: Quart) -> Server | None:
    """The app's server; None before it serves."""
    server = app.config.get(_KEY)
    return server if isinstance(server, Server) else None


def server_of(app: Quart) -> Server:
    server = opened(app)
    if server is None:
        raise RuntimeError("the app is not serving: its server is not open")
    return server


def current_server() -> Server:
    """The server of the app handling this request."""
    return server_of(current_app)


def serve(app: Quart, server: Server) -> None:
    app.config[_KEY] = server
