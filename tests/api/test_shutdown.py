"""A graceful stop inside the app (omni/api/app.py shut_down, Runs.drain): new work is
refused while running work gets the grace; then foreground completions end with a recorded
error their clients receive, and background responses are left for the next start.
The whole process under SIGTERM: tests/test_shutdown.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import openai

from omni.api.app import shut_down
from omni.runtime.chat.engine import MLXEngine
from omni.vocabulary import ACCEPTED
from tests.api._helpers import (
    CANCEL_REQUESTED,
    LONG_RUN,
    MODEL,
    assert_error,
    is_finished,
    n_deltas,
    read_log,
    wait_for,
)
from tests.server import ServerThread, running

COMPLETION_SHUT_DOWN = "The server shut down before this completion finished."
CHAT = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "go on and on"}],
    "temperature": 0,
    "max_tokens": 4000,
}


def begin_stop(srv: ServerThread) -> Any:
    async def begin() -> Any:
        return shut_down(srv.app)

    return srv.call(begin())


def accepted(srv: ServerThread) -> int:
    return len(srv.call(srv.state.store.by_type(ACCEPTED)))


def test_a_stopping_server_refuses_new_work_and_lets_running_work_end(
    tiny_engine: MLXEngine, tmp_path: Path
) -> None:
    with running(tiny_engine, tmp_path / "omni.db", shutdown_grace_s=600) as (srv, client):
        busy = client.responses.create(model=MODEL, background=True, **LONG_RUN).id
        assert wait_for(lambda: n_deltas(srv, busy) >= 1, timeout=60)
        stopping = begin_stop(srv)
        with httpx.Client(base_url=srv.base_url, timeout=10) as http:
            health = http.get("/health")
            assert health.status_code == 503 and health.json() == {"status": "shutting_down"}
            for path, body in [
                ("/v1/responses", {"model": MODEL, "input": "hi"}),
                ("/v1/chat/completions", CHAT),
                ("/v1/completions", {"model": MODEL, "prompt": "hi"}),
            ]:
                refused = http.post(path, json=body)
                assert_error(refused, 503, code="server_shutting_down", type_="server_error")
                assert refused.headers["retry-after"] == "1"  # nothing ran: retrying is safe
                assert "x-should-retry" not in refused.headers
            # Reads and cancels are still served through the grace.
            assert client.responses.retrieve(busy).status == "in_progress"
            assert not stopping.done()
            assert client.responses.cancel(busy).status == "cancelled"
        assert wait_for(stopping.done, timeout=60)
        assert stopping.exception() is None


def test_after_the_grace_foreground_completions_end_and_background_work_is_left(
    tiny_engine: MLXEngine, tmp_path: Path
) -> None:
    db = tmp_path / "omni.db"
    chunks: list[Any] = []
    errors: list[BaseException] = []
    plain: list[httpx.Response] = []
    with running(tiny_engine, db, shutdown_grace_s=0.2) as (srv, client):
        busy = client.responses.create(model=MODEL, background=True, **LONG_RUN).id

        def stream() -> None:
            try:
                for chunk in client.chat.completions.create(stream=True, **CHAT):
                    chunks.append(chunk)
            except openai.APIError as exc:
                errors.append(exc)

        def post() -> None:
            plain.append(httpx.post(f"{srv.base_url}/v1/chat/completions", json=CHAT, timeout=30))

        threads = [threading.Thread(target=stream), threading.Thread(target=post)]
        for thread in threads:
            thread.start()
        assert wait_for(lambda: accepted(srv) == 3 and len(chunks) >= 5, timeout=60)
        stopping = begin_stop(srv)
        assert wait_for(stopping.done, timeout=60)
        for thread in threads:
            thread.join(timeout=10)
        # The streamed chat got the recorded error (after its content), the plain one as JSON.
        assert [str(e.message) for e in errors] == [COMPLETION_SHUT_DOWN], chunks[-1:]
        assert any(c.choices and c.choices[0].delta.content for c in chunks)
        assert all(not c.choices or c.choices[0].finish_reason is None for c in chunks)
        error = assert_error(plain[0], 500, code="server_error", type_="server_error")
        assert error["message"] == COMPLETION_SHUT_DOWN
        # The background response is left as a crash leaves it: unfinished, never cancelled.
        left = read_log(srv, busy)
        assert left[-1].type == "response.output_text.delta"
        assert client.responses.retrieve(busy).status == "in_progress"
        assert srv.state.responses.runs.get(busy) is None  # no longer recorded here

    with running(tiny_engine, db) as (srv, client):
        # The next start carries it on: the same stream goes on from where it was left.
        assert wait_for(lambda: n_deltas(srv, busy) > sum(e.type.endswith("delta") for e in left))
        assert [e.seq for e in read_log(srv, busy)][: len(left)] == [e.seq for e in left]
        assert client.responses.cancel(busy).status == "cancelled"
        assert is_finished(srv, busy)
        facts = [e.type for e in read_log(srv, f"{busy}/request")]
        assert facts.count(CANCEL_REQUESTED) == 1  # this cancel; the stop made none
