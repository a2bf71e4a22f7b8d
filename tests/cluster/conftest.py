"""A cluster as an operator runs one: two `omni serve` replicas on one fresh PostgreSQL
database, sharing OMNI_HOME (so the reasoning key), behind a real nginx on loopback that
sends requests to them in turn. Each test module gets a cluster of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from openai import OpenAI

from tests.api._helpers import strip_keepalives
from tests.postgres import database, rows
from tests.server import free_port
from tests.test_cli import serving

MODEL = "tiny-llama"
LEASE_S = 2  # a killed replica's work is taken over within a few seconds (a module's LEASE_S)
UPSTREAM = "x-omni-upstream"  # the balancer's answer header naming the replica it used
DELTA = "response.output_text.delta"
T = TypeVar("T")


@dataclass
class Replica:
    name: str
    base: str
    proc: subprocess.Popen[str]
    log: Path

    @property
    def address(self) -> str:
        return self.base.removeprefix("http://")


@dataclass
class Cluster:
    db: str
    replicas: dict[str, Replica]
    balancer: str  # nginx's base URL

    def serving(self, response: httpx.Response) -> Replica:
        """The replica that answered a request sent through the balancer."""
        address = response.headers[UPSTREAM]
        return next(r for r in self.replicas.values() if r.address == address)

    def sdk(self, base: str | None = None) -> OpenAI:
        return OpenAI(
            base_url=f"{base or self.balancer}/v1",
            api_key="test",
            max_retries=0,
            timeout=120,
            _strict_response_validation=True,
        )

    def events(self, stream_id: str) -> list[tuple[int, int, str, str]]:
        """A stream's rows as the log holds them: (position, seq, type, data)."""
        return rows(
            self.db,
            "SELECT position, seq, type, data FROM events WHERE stream_id = %s ORDER BY seq",
            stream_id,
        )

    def sse(self, stream_id: str) -> bytes:
        """What every replay of a response must send: its rows as SSE frames."""
        return b"".join(
            f"event: {type_}\ndata: {data}\nid: {seq}\n\n".encode()
            for _, seq, type_, data in self.events(stream_id)
        )

    def deltas(self, stream_id: str) -> int:
        (count,) = rows(
            self.db,
            "SELECT count(*) FROM events WHERE stream_id = %s AND type = %s",
            stream_id,
            DELTA,
        )[0]
        return int(count)

    def wait_for_deltas(self, stream_id: str, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.deltas(stream_id) < n:
            assert time.monotonic() < deadline, f"{stream_id} never had {n} deltas"
            time.sleep(0.02)


NGINX = """
worker_processes 1;
{user}
pid nginx.pid;
error_log error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log access.log;
    client_body_temp_path temp/body;
    proxy_temp_path temp/proxy;
    fastcgi_temp_path temp/fastcgi;
    uwsgi_temp_path temp/uwsgi;
    scgi_temp_path temp/scgi;
    upstream omni {{
{servers}
        keepalive 32;
        keepalive_timeout 4s;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://omni;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
            add_header {upstream} $upstream_addr always;
        }}
    }}
}}
"""


def nginx_config(port: int, replicas: list[Replica]) -> str:
    """Idle connections to a replica are closed by nginx before Hypercorn's 5 s do: else a
    request sent on one the replica is closing fails (a 502: nginx retries no POST)."""
    servers = "\n".join(f"        server {r.address};" for r in replicas)
    # As root, the workers would run as nobody, who may not enter the test's folders.
    user = "user root;" if os.geteuid() == 0 else ""
    return NGINX.format(user=user, servers=servers, port=port, upstream=UPSTREAM)


@contextmanager
def balancer(prefix: Path, replicas: list[Replica]) -> Iterator[str]:
    """A real nginx in front of `replicas`, round robin, until the block ends."""
    executable = shutil.which("nginx") or "/usr/sbin/nginx"
    (prefix / "temp").mkdir(parents=True)
    port = free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(nginx_config(port, replicas))
    args = [executable, "-p", f"{prefix}/", "-c", str(conf), "-e", str(prefix / "error.log")]
    proc = subprocess.Popen([*args, "-g", "daemon off;"], stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/health", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, f"nginx exited: {proc.stderr.read()}"  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def started(stack: ExitStack, starts: dict[str, AbstractContextManager[T]]) -> dict[str, T]:
    """Enter the contexts at once (the replicas start side by side), each left by `stack`."""
    with ThreadPoolExecutor(len(starts)) as pool:
        entering = {name: pool.submit(cm.__enter__) for name, cm in starts.items()}
        wait(entering.values())
    for name, future in entering.items():
        if future.exception() is None:
            stack.push(starts[name].__exit__)
    return {name: future.result() for name, future in entering.items()}


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("cluster")
    lease = getattr(request.module, "LEASE_S", LEASE_S)
    env = {"OMNI_HOME": str(folder / "home")}
    with ExitStack() as stack:
        url = stack.enter_context(database("omni_cluster"))
        starts = {
            name: serving(
                tiny_model_dir,
                url,  # type: ignore[arg-type]
                "info",
                folder / f"{name}.log",
                *("--replica-id", name, "--lease", str(lease)),
                env=env,
            )
            for name in ("a", "b")
        }
        replicas = [
            Replica(name, base, proc, folder / f"{name}.log")
            for name, (base, proc) in started(stack, starts).items()
        ]
        front = stack.enter_context(balancer(folder / "nginx", replicas))
        yield Cluster(url, {r.name: r for r in replicas}, front)


def data_of(row: tuple[Any, ...]) -> dict[str, Any]:
    return json.loads(row[3])  # type: ignore[no-any-return]


def whole_frames(body: bytes) -> bytes:
    """The complete frames of a stream cut anywhere (keep-alives left out)."""
    body = strip_keepalives(body)
    return body[: body.rfind(b"\n\n") + 2]
