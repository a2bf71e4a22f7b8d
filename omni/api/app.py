"""The Quart application: the blueprints, the error handler and the lifespan. The server it
routes to (omni.server) is built before serving and closed after."""

from __future__ import annotations

import asyncio
from typing import Any

from quart import Quart, Response

from omni import server
from omni.api import (
    access,
    chat,
    conversations,
    embeddings,
    errors,
    gate,
    images,
    inspector,
    messages,
    metrics,
    models,
    responses,
    socket_gate,
    speech,
    transcriptions,
)
from omni.api.current import opened, serve, server_of
from omni.api.gate import Access
from omni.ids import new_id
from omni.metrics import Metrics
from omni.ports.chat import Engine
from omni.service.models import Models
from omni.settings import ServerSettings

# The app's settings (omni.settings), by the name the app has always given them.
Settings = ServerSettings

BLUEPRINTS = (
    responses,
    conversations,
    models,
    chat,
    messages,
    embeddings,
    speech,
    images,
    transcriptions,
)


def shut_down(app: Quart) -> asyncio.Task[None]:
    """Begin (or join) the graceful stop (omni.lifecycle, Lifecycle.stop)."""
    return server_of(app).lifecycle.stop()


def create_app(settings: Settings, served: Models | Engine) -> Quart:
    """An app serving `served` (the models, or one engine, loaded already, alone) over the
    log at settings.db_path (an SQLite file or a PostgreSQL URL)."""
    app = Quart("omni")
    errors.install(app)
    figures = Metrics()  # this app's alone: never the process-wide default registry
    access.install(app, figures)  # first: requests the gate refuses are logged by their route
    rules = settings.access or Access()
    gate.install(app, rules)
    socket_gate.install(app, rules)  # the same rules, for WebSockets' upgrades
    for prefix in ("/v1", ""):
        for module in BLUEPRINTS:
            bp = module.bp
            app.register_blueprint(bp, url_prefix=prefix, name=f"{bp.name}{prefix}")
    app.register_blueprint(metrics.bp)
    app.register_blueprint(inspector.bp)

    @app.after_request
    async def request_id(response: Response) -> Response:
        # The SDK reports it as exc.request_id; it helps match a client error to the log.
        response.headers.setdefault("x-request-id", new_id("req"))
        return response

    @app.get("/health")
    @app.get("/v1/health")
    async def health() -> Any:
        running = opened(app)
        if running is not None:
            running.store.check_file()  # a 503 once the log's file is deleted or replaced
        if running is not None and running.lifecycle.closing:  # so balancers look elsewhere
            return {"status": "shutting_down"}, 503
        if settings.ranks is not None:  # the chat model's ranks: all up, or it is reloading
            return {"status": "ok", "ranks": settings.ranks.to_json()}
        return {"status": "ok"}

    @app.before_serving
    async def open_server() -> None:
        serve(app, await server.build(settings, served, figures))

    @app.after_serving
    async def close_server() -> None:
        await server_of(app).close()

    return app
