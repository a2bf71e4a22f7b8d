"""Search and filters over the log (migration 0014's `search`, omni/inspect/search.py), on a
log written by hand: each object found by a word of what it was asked or answered, filters
that combine, each sort paged whole by its cursor, the index kept through a purge and built
for a log that predates it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command

from omni.db import alembic_config
from omni.errors import InvalidRequest
from omni.inspect import Inspector, open_log
from omni.inspect.search import SORTS, Cursor, Filters, match, moment, words
from tests.inspect._search_log import IDS, T0, write
from tests.inspect.test_postgres import copy
from tests.postgres import database, empty, rows


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("search") / "omni.db"
    write(path)
    return path


@pytest.fixture
def ins(db: Path) -> Iterator[Inspector]:
    engine = open_log(str(db))
    with engine.connect() as conn:
        yield Inspector(conn)
    engine.dispose()


def _found(ins: Inspector, **asked: object) -> list[str]:
    return [s.id for s in ins.page(Filters(**asked), limit=100).rows]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("heron", ["resp_last", "resp_first"]),  # input and output, newest first
        ("grey", ["resp_first"]),  # a response's output
        ("verse", ["resp_last", "resp_failed", "resp_first"]),  # instructions
        ("kestrel", ["chatcmpl-one"]),  # a chat message
        ("falcon", ["chatcmpl-one"]),  # its deltas, joined
        ("brief", ["chatcmpl-one"]),  # its system message
        ("lighthouse keeper", ["cmpl-one"]),  # a list of prompts, and the output
        ("sailor harbour", ["msg_one"]),  # a message's system and its deltas
        ("cafe MULLER", ["msg_one"]),  # case and accents folded
        ("orchard", ["speech_one"]),
        ("teapot", ["img_one"]),
        ("tide", ["tr_one"]),
        ("her", ["resp_last", "resp_first"]),  # each word a prefix
        ("heron otter", []),  # every word
        ("base64 c2VjcmV0aW1hZ2U", []),  # an image's data is not text
        ("plan", []),  # nor what the server made of the request
        ("", IDS[::-1]),  # no words: no text filter
    ],
)
def test_a_word_finds_what_was_asked_or_answered(ins: Inspector, text: str, ids: list[str]) -> None:
    assert _found(ins, text=text) == ids


def test_filters_combine(ins: Inspector) -> None:
    assert _found(ins, kind="chat.completion") == ["chatcmpl-one"]
    assert _found(ins, text="heron", owner="bob") == []
    assert _found(ins, text="tell", status="failed") == ["resp_failed"]
    assert _found(ins, model="m-small", owner="bob") == ["cmpl-one", "chatcmpl-one"]
    assert _found(ins, since_ms=T0 + 1000, until_ms=T0 + 3000) == ["cmpl-one", "chatcmpl-one"]
    assert _found(ins, text="heron", sort="oldest") == ["resp_first", "resp_last"]
    # A key's scope and an owner asked for: both hold.
    assert ins.page(Filters(owner="bob"), scope="alice").rows == []


@pytest.mark.parametrize("sort", list(SORTS))
def test_each_sort_pages_whole_by_its_cursor(ins: Inspector, sort: str) -> None:
    everything = [s.id for s in ins.page(Filters(sort=sort), limit=100).rows]
    assert sorted(everything) == sorted(IDS)
    paged: list[str] = []
    after = None
    while True:
        page = ins.page(Filters(sort=sort), limit=2, after=after)
        paged += [s.id for s in page.rows]
        if page.next_cursor is None:
            break
        after = Cursor.decode(page.next_cursor.encode())  # through its opaque form
    assert paged == everything


def test_sorts_by_duration_and_tokens(ins: Inspector, db: Path) -> None:
    with sqlite3.connect(db) as conn:
        took = dict(
            conn.execute("SELECT id, coalesce(finished_at - created_at, -1) FROM summaries")
        )
        used = dict(
            conn.execute("SELECT id, coalesce(input_tokens + output_tokens, 0) FROM summaries")
        )
    longest = [took[s.id] for s in ins.page(Filters(sort="duration"), limit=100).rows]
    assert longest == sorted(longest, reverse=True) and longest[0] > longest[-1]
    most = ins.page(Filters(sort="tokens"), limit=100).rows
    assert [s.id for s in most[:2]] == ["resp_last", "resp_failed"]  # 50 each, newest first
    tokens = [used[s.id] for s in most]  # as the log holds them (a summary fills some in)
    assert tokens == sorted(tokens, reverse=True)


def test_the_index_follows_a_purge(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    write(path)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM events WHERE stream_id IN ('resp_first', 'resp_first/request')")
        assert conn.execute("SELECT count(*) FROM search").fetchone() == (len(IDS) - 1,)
        found = conn.execute("SELECT rowid FROM search WHERE search MATCH 'grey'").fetchall()
    assert found == []


def _index(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT rowid, input, output FROM search ORDER BY rowid").fetchall()


def test_the_migration_indexes_a_log_written_before_it(db: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    write(old, "0013")
    command.upgrade(alembic_config(str(old)), "head")
    assert len(_index(old)) == len(IDS) and _index(old) == _index(db)
    command.downgrade(alembic_config(str(old)), "0013")
    with sqlite3.connect(old) as conn:
        left = conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'search%'").fetchall()
    assert left == []


def test_values_a_reader_may_send() -> None:
    assert match("  Café, au-lait_x! ", postgres=False) == '"Cafe"* "au"* "lait"* "x"*'
    assert match("heron wren", postgres=True) == "heron:* & wren:*"
    assert match("?!", postgres=False) is None
    assert moment("2026-12-05", "since") == 1_796_428_800_000
    assert moment("2026-12-05T00:00:01Z", "since") == 1_796_428_801_000
    assert moment("2026-12-05T01:00:00+01:00", "since") == 1_796_428_800_000
    assert moment("1796428800000", "since") == 1_796_428_800_000
    with pytest.raises(InvalidRequest, match="'until' must be an ISO 8601"):
        moment("yesterday", "until")
    with pytest.raises(InvalidRequest, match="'cursor'"):
        Cursor.decode("not a cursor")
    with pytest.raises(InvalidRequest, match="'sort' must be one of"):
        Filters(sort="random")
    assert Cursor.decode(Cursor(-1, 42).encode()) == Cursor(-1, 42)


ASKED = [
    Filters(text="heron"),
    Filters(text="cafe MULLER"),
    Filters(text="falcon", kind="chat.completion", owner="bob"),
    Filters(text="tell", status="failed"),
    Filters(since_ms=T0 + 1000, until_ms=T0 + 3000, sort="oldest"),
    Filters(sort="duration"),
    Filters(sort="tokens", model="m-large"),
]


def _words(rows: list[tuple[object, ...]]) -> dict[object, list[list[str]]]:
    """Each row's input and output as sorted words (the two walk JSON in their own order)."""
    return {r[0]: [sorted(words(str(t or ""))) for t in r[1:]] for r in rows}


def test_postgresql_finds_the_same(db: Path) -> None:
    with database("omni_search") as url:
        command.upgrade(alembic_config(url), "0013")
        copy(db, url)  # written before 0014: its backfill indexes them
        command.upgrade(alembic_config(url), "head")
        backfilled = rows(url, "SELECT position, input, output FROM search ORDER BY position")
        assert _words(backfilled) == _words(_index(db))
        empty(url)  # then written again, through its triggers
        copy(db, url)
        live = rows(url, "SELECT position, input, output FROM search ORDER BY position")
        assert _words(live) == _words(_index(db))
        sqlite_engine, pg_engine = open_log(str(db)), open_log(url)
        try:
            with sqlite_engine.connect() as a, pg_engine.connect() as b:
                for filters in ASKED:
                    on_sqlite = Inspector(a).page(filters, limit=2)
                    assert on_sqlite.rows, filters
                    assert Inspector(b).page(filters, limit=2) == on_sqlite
                    after = on_sqlite.next_cursor
                    if after is not None:
                        on_sqlite = Inspector(a).page(filters, limit=5, after=after)
                        assert Inspector(b).page(filters, limit=5, after=after) == on_sqlite
        finally:
            sqlite_engine.dispose()
            pg_engine.dispose()
