"""A real Hypercorn server on a loopback port, in a background thread, for end-to-end tests."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from hypercorn.asyncio import serve
from hypercorn.config import Config

from omni.api.app import Settings, create_app
from omni.api.current import server_of
from omni.server import Server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerThread:
    def __init__(self, settings: Settings, engine: Any):
        self.app = create_app(settings, engine)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            config = Config()
            config.bind = [f"127.0.0.1:{self.port}"]
            config.accesslog = None
            await serve(self.app, config, shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]

        asyncio.run(main())

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    @property
    def state(self) -> Server:
        return server_of(self.app)

    def call(self, coro: Any) -> Any:
        """Run a coroutine on the server's loop (to reach the store from a test)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)


@contextmanager
def serving(engine: Any, db: Path, home: Path | None = None) -> Iterator[Any]:
    """A server on `engine` with its log at `db` (and OMNI_HOME `home`), and the OpenAI SDK
    in strict mode as its client."""
    with running(engine, db, home=str(home) if home else None) as (_, client):
        yield client


@contextmanager
def running(engine: Any, db: Path, **settings: Any) -> Iterator[tuple[ServerThread, Any]]:
    """serving(), with the server too and any other Settings."""
    from openai import OpenAI

    srv = ServerThread(Settings(db_path=str(db), keepalive=1.0, **settings), engine).start()
    client = OpenAI(
        base_url=f"{srv.base_url}/v1",
        api_key="test",
        max_retries=0,
        _strict_response_validation=True,
    )
    try:
        yield srv, client
    finally:
        client.close()
        srv.stop()
