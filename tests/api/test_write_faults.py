"""A generation whose events cannot be written (the disk full) stops, and ends `failed` once
writes work again (or at the next start); its followers are told; the log says it once."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import openai
import pytest

from omni.events.sqlite import maintenance
from omni.service.retention import VOCABULARY
from omni.service.unwritten import UNWRITTEN
from tests.faults import Dripping, disk_full
from tests.server import running

DEADLINE = 30.0  # a hang, not a margin: each wait below ends on an event


def wait_for(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE}s"
        time.sleep(0.01)


class Reader(threading.Thread):
    """Reads an SDK stream to its end in a thread (a hang must fail the test, not block it);
    `deltas` is set once two text deltas arrived (committed: the fault begins mid-stream)."""

    def __init__(self, open_stream: Callable[[], Any], is_delta: Callable[[Any], bool]):
        super().__init__(daemon=True)
        self.open_stream, self.is_delta = open_stream, is_delta
        self.events: list[Any] = []
        self.error: BaseException | None = None
        self.deltas = threading.Event()

    def run(self) -> None:
        try:
            for event in self.open_stream():
                self.events.append(event)
                if sum(map(self.is_delta, self.events)) >= 2:
                    self.deltas.set()
        except BaseException as exc:  # what the SDK raised: part of the outcome
            self.error = exc

    def finish(self) -> None:
        self.join(DEADLINE)
        assert not self.is_alive(), f"the stream hung after {[e.type for e in self.events]}"


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("omni")
    ]


def fill_mid_stream(srv: Any, engine: Dripping, reader: Reader) -> None:
    reader.start()
    assert reader.deltas.wait(DEADLINE), "no deltas"
    srv.call(disk_full(srv.state.store))
    wait_for(engine.stopped.is_set, "stop of the generation")  # it stops, though not ended


def test_a_response_whose_events_cannot_be_written_ends_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    engine = Dripping()
    with running(engine, tmp_path / "omni.db") as (srv, client):
        reader = Reader(
            lambda: client.responses.create(model="scripted", input="hi", stream=True),
            lambda e: e.type == "response.output_text.delta",
        )
        fill_mid_stream(srv, engine, reader)
        assert engine.emitted < engine.limit
        time.sleep(0.3)  # the disk stays full a while: the log says so once all the same
        assert len(warnings(caplog)) == 1 and "disk is full" in warnings(caplog)[0]
        srv.call(disk_full(srv.state.store, full=False))
        reader.finish()

        assert reader.error is None, reader.error
        events = reader.events
        assert [e.sequence_number for e in events] == list(range(len(events)))
        last = events[-1]
        assert last.type == "response.failed"
        assert last.response.status == "failed" and last.response.error.message == UNWRITTEN
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert last.response.output[0].content[0].text == text  # what was written, exactly
        stored = client.responses.retrieve(last.response.id)
        assert stored.status == "failed" and stored.output_text == text
    assert len(warnings(caplog)) == 1
    with closing(maintenance.connect(str(tmp_path / "omni.db"))) as conn:
        assert maintenance.check(conn, VOCABULARY) == []  # no gap, one terminal event


def test_a_chat_stream_whose_chunks_cannot_be_written_ends_with_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    engine = Dripping()
    with running(engine, tmp_path / "omni.db") as (srv, client):
        reader = Reader(
            lambda: client.chat.completions.create(
                model="scripted",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                store=True,  # kept, to read its ending (an unstored one leaves once read)
            ),
            lambda chunk: bool(chunk.choices and chunk.choices[0].delta.content),
        )
        fill_mid_stream(srv, engine, reader)
        srv.call(disk_full(srv.state.store, full=False))
        reader.finish()
        assert isinstance(reader.error, openai.APIError), reader.error
        assert reader.error.message == UNWRITTEN
        cid = reader.events[0].id
    assert len(warnings(caplog)) == 1
    with closing(sqlite3.connect(tmp_path / "omni.db")) as conn:
        types = [t for (t,) in conn.execute("SELECT type FROM events WHERE stream_id = ?", (cid,))]
    assert types[-1] == "completion.error" and types.count("completion.error") == 1


def test_a_stop_while_the_disk_is_full_leaves_recovery_to_end_it(tmp_path: Path) -> None:
    engine = Dripping()
    db = tmp_path / "omni.db"
    with running(engine, db) as (srv, client):
        reader = Reader(
            lambda: client.responses.create(model="scripted", input="hi", stream=True),
            lambda e: e.type == "response.output_text.delta",
        )
        fill_mid_stream(srv, engine, reader)
        response_id = reader.events[0].response.id
    reader.finish()  # the server went away under it
    with running(Dripping(), db) as (_, client):  # the next start: the disk has room again
        stored = client.responses.retrieve(response_id)
        assert stored.status == "failed"
        assert stored.error is not None and "restarted" in stored.error.message
