"""CI's wheel smoke test: run by the python of a fresh venv where the wheel (and openai) are
installed, not editable. `omni serve` on a tiny model, one Responses create and its streamed
replay through the OpenAI SDK, the web inspector's pages (files of the package) and its JSON,
then SIGTERM: exit code 0, no traceback, no PyTorch advice."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from openai import OpenAI

import omni
from omni.testing.llama import build_tiny_llama


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"wheel smoke: omni serve exited during start-up ({proc.returncode})")
        if time.monotonic() > deadline:
            raise SystemExit("wheel smoke: omni serve did not start")
        time.sleep(0.2)


def get(url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.status == 200, (url, reply.status)
        return reply.headers.get("content-type", ""), reply.read()


def check_inspector(base: str, response_id: str) -> None:
    """The pages come from the installed package's files; the JSON lists the response."""
    for path, kind in [
        ("/inspect", "text/html"),
        (f"/inspect/{response_id}", "text/html"),
        ("/inspect/static/object.js", "text/javascript"),
        ("/inspect/static/inspect.css", "text/css"),
        ("/inspect/dashboard", "text/html"),
        ("/inspect/static/uPlot.iife.min.js", "text/javascript"),  # the charts' library
    ]:
        content_type, body = get(base + path)
        assert content_type.startswith(kind) and body, (path, content_type)
    _, body = get(f"{base}/inspect/api/recent")
    assert json.loads(body)["data"][0]["id"] == response_id, body[:300]
    _, body = get(f"{base}/inspect/api/trends?window=15m")
    assert sum(json.loads(body)["requests_per_min"]) > 0, body[:300]


def main() -> None:
    venv = Path(sys.prefix)
    assert Path(omni.__file__).is_relative_to(venv), f"omni comes from {omni.__file__}"
    work = Path(tempfile.mkdtemp(prefix="omni-wheel-smoke-"))
    model = build_tiny_llama(work / "tiny-llama")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = work / "serve.log"
    command = [str(venv / "bin" / "omni"), "serve", "--model", str(model), "--port", str(port)]
    with log.open("w") as err:
        proc = subprocess.Popen(command, cwd=work, stdout=err, stderr=subprocess.STDOUT)
        try:
            wait_healthy(base, proc)
            client = OpenAI(base_url=f"{base}/v1", api_key="not-needed", max_retries=0)
            model_id = client.models.list().data[0].id
            created = client.responses.create(model=model_id, input="hi", max_output_tokens=8)
            assert created.status in ("completed", "incomplete"), created.status
            events = list(client.responses.retrieve(created.id, stream=True))
            types = [event.type for event in events]
            assert types[0] == "response.created", types
            assert types[-1] == f"response.{created.status}", types
            assert [e.sequence_number for e in events] == list(range(len(events)))
            replayed = events[-1].response  # type: ignore[union-attr]
            assert replayed.output_text == created.output_text
            check_inspector(base, created.id)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
    text = log.read_text()
    assert code == 0, f"omni serve exited {code}:\n{text}"
    assert "Traceback" not in text and "PyTorch" not in text, text
    assert (work / "omni.db").is_file()
    shutil.rmtree(work)  # kept when something failed, for its serve.log
    print(
        f"wheel smoke: ok (omni from {Path(omni.__file__).parent}, {len(events)} events "
        f"replayed, clean stop)"
    )


if __name__ == "__main__":
    main()
