"""`omni db backup | purge | check` and `serve --retention` against a real server and the SDK:
a backup taken while a response streams is the log's committed prefix and serves again; a
purge removes exactly what its dry run lists, and the API answers 404 for it afterwards."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from openai import NotFoundError

from omni import cli
from omni.events.maintenance import SUFFIXES
from omni.events.sqlite import maintenance
from omni.service.retention import VOCABULARY
from tests.api._helpers import LONG_RUN, MODEL, TERMINAL, wait_for
from tests.server import running

CHAT = [{"role": "user", "content": "remember me"}]


def rows(db: Path, upto: int | None = None) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        sql = "SELECT * FROM events WHERE position <= ? ORDER BY position"
        return conn.execute(sql, (upto if upto is not None else 2**62,)).fetchall()


def cache_rows(db: Path) -> set[str]:
    with closing(sqlite3.connect(db)) as conn:
        return {cid for (cid,) in conn.execute("SELECT completion_id FROM chat_cache")}


def sound(db: Path) -> bool:
    with closing(maintenance.connect(str(db))) as conn:
        return maintenance.check(conn, VOCABULARY) == []


def test_backup_while_streaming_is_the_committed_prefix(tiny_engine: Any, tmp_path: Path) -> None:
    db, copy = tmp_path / "omni.db", tmp_path / "backup.db"
    with running(tiny_engine, db) as (srv, client):
        done = client.responses.create(model=MODEL, input="before", max_output_tokens=4)
        deltas = 0
        stream = client.responses.create(model=MODEL, stream=True, **LONG_RUN)
        for event in stream:
            if event.type == "response.created":
                rid = event.response.id
            deltas += event.type == "response.output_text.delta"
            if deltas == 5:  # mid-generation: the recorder appends on meanwhile
                maintenance.backup(str(db), str(copy))
                break
        stream.close()  # the client leaves: the server cancels and ends the response
        assert wait_for(lambda: srv.call(srv.state.store.last(rid)).type in TERMINAL, 30)
    taken = rows(copy)
    source = rows(db)
    assert taken == source[: len(taken)]  # the same rows, byte for byte, up to where it was taken
    ids = [r[1] for r in taken]
    assert ids.count(rid) >= 2 + 5  # created, in_progress, 5 deltas at least
    assert not {r[3] for r in taken if r[1] == rid} & set(TERMINAL)  # LONG_RUN takes seconds
    assert sound(copy)
    assert cli.main(["db", "check", "--db", str(copy)]) == 0
    # The copy serves: what had finished reads the same; the rest was closed by recovery.
    with running(tiny_engine, copy) as (_, restored):
        assert restored.responses.retrieve(done.id).model_dump() == done.model_dump()
        assert restored.responses.retrieve(rid).status == "failed"  # recovery closed it
    assert sound(copy)


def test_backup_refuses_an_existing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, target = tmp_path / "omni.db", tmp_path / "taken.db"
    cli.main(["db", "upgrade", "--db", str(db)])
    target.write_bytes(b"precious")
    assert cli.main(["db", "backup", str(target), "--db", str(db)]) == 1
    assert "never overwrites" in capsys.readouterr().err
    assert target.read_bytes() == b"precious"


def test_purge_removes_what_the_dry_run_lists(
    tiny_engine: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "omni.db"
    with running(tiny_engine, db) as (_, client):
        old = client.responses.create(model=MODEL, input="old", max_output_tokens=3)
        gone = client.responses.create(model=MODEL, input="deleted", max_output_tokens=3)
        client.responses.delete(gone.id)
        chat = client.chat.completions.create(
            model=MODEL,
            messages=CHAT,
            max_tokens=2,
            temperature=0,
            store=True,  # type: ignore[arg-type]
        )
        assert cache_rows(db) == {chat.id}
        time.sleep(0.05)
        cut = datetime.now()
        time.sleep(0.05)
        new = client.responses.create(model=MODEL, input="new", max_output_tokens=3)
        newer_chat = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "keep"}], max_tokens=2, store=True
        )
    before = rows(db)
    purge = ["db", "purge", "--db", str(db), "--before", cut.isoformat()]

    assert cli.main([*purge, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    listed = {line.split("\t")[0]: line.split("\t")[1] for line in out if "\t" in line}
    assert listed == {old.id: old.status, gone.id: "deleted", chat.id: "completed"}
    assert rows(db) == before  # a dry run removes nothing
    doomed = {i for i in listed} | {f"{i}{s}" for i in listed for s in SUFFIXES}
    expected = [r for r in before if r[1] not in doomed]
    assert (
        out[-1]
        == f"omni: would remove 2 responses, 1 completions: {len(before) - len(expected)} events"
    )

    assert cli.main(purge) == 0
    said = capsys.readouterr().out
    assert f"removed 2 responses, 1 completions: {len(before) - len(expected)} events" in said
    assert rows(db) == expected
    assert cache_rows(db) == set()
    assert cli.main(["db", "check", "--db", str(db)]) == 0

    with running(tiny_engine, db) as (_, client):
        for purged in (old.id, gone.id):
            with pytest.raises(NotFoundError):
                client.responses.retrieve(purged)
            with pytest.raises(NotFoundError):
                client.responses.retrieve(purged, stream=True)
            with pytest.raises(NotFoundError):
                client.responses.input_items.list(purged)
        with pytest.raises(NotFoundError):
            client.chat.completions.retrieve(chat.id)
        with pytest.raises(NotFoundError):
            client.chat.completions.messages.list(chat.id)
        assert [c.id for c in client.chat.completions.list()] == [newer_chat.id]
        assert client.responses.retrieve(new.id).id == new.id
        # The replay-cache entry went with its completion: the same request generates again.
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=CHAT,
            max_tokens=2,
            temperature=0,  # type: ignore[arg-type]
        )
        assert raw.headers["x-omni-cache"] == "miss"


def test_retention_purges_on_schedule_but_never_a_running_response(
    tiny_engine: Any, tmp_path: Path
) -> None:
    db = tmp_path / "omni.db"
    with running(tiny_engine, db, retention_s=0.3, retention_every_s=0.05) as (srv, client):
        long = client.responses.create(model=MODEL, background=True, **LONG_RUN)
        short = client.responses.create(model=MODEL, input="brief", max_output_tokens=2)
        chat = client.chat.completions.create(
            model=MODEL,
            messages=CHAT,
            max_tokens=2,
            temperature=0,
            store=True,  # type: ignore[arg-type]
        )

        def purged(fetch: Any) -> bool:
            try:
                fetch()
            except NotFoundError:
                return True
            return False

        assert wait_for(lambda: purged(lambda: client.responses.retrieve(short.id)), 30)
        assert wait_for(lambda: purged(lambda: client.chat.completions.retrieve(chat.id)), 30)
        assert purged(lambda: client.responses.retrieve(short.id, stream=True))
        assert purged(lambda: client.responses.input_items.list(short.id))
        assert cache_rows(db) == set()
        # The background response ran on through every pass meanwhile, its log intact.
        assert srv.state.retention.passes >= 2
        assert client.responses.retrieve(long.id).status in ("queued", "in_progress")
        assert sound(db)
        client.responses.cancel(long.id)
        assert wait_for(lambda: purged(lambda: client.responses.retrieve(long.id)), 30)
    assert {r[1].split("/")[0] for r in rows(db)} == set()
    assert sound(db)
