"""The CLI's output: plain, one event a line whatever the text holds; on a terminal, tables
that fit its width without cutting an id or a number."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.cells import cell_len

from omni.cli.inspect.commands import ls_table
from omni.cli.inspect.layout import Column, fit
from omni.cli.inspect.output import Out
from omni.inspect import Summary
from omni.inspect.folding import disk_cached


def test_an_events_text_stays_on_its_line() -> None:
    # A model may write any character str.splitlines breaks on, and tabs.
    text = "a\tb\nc\rd\x0be\x0cf\x1cg\x1dh\x1ei\x85j\u2028k\u2029l"
    stream = io.StringIO()
    Out(stream, pretty=False).event("2026-12-02T00:00:00.000Z", "resp_1", 3, "t", text)
    (line,) = stream.getvalue().splitlines()
    assert line.split("\t") == [
        "2026-12-02T00:00:00.000Z",
        "resp_1",
        "3",
        "t",
        "a b c d e f g h i j k l",
    ]


def summary(
    id_: str,
    status: str,
    model: str | None,
    tokens: tuple[int, int] | None,
    ttft: int | None,
    rate: float | None,
    preview: str,
    deleted: bool = False,
    owner: str | None = None,
) -> Summary:
    inp, out = tokens or (None, None)
    return Summary(id_, "response", "2026-12-02T10:11:12.345Z", 0, status, model, inp, out,
                   ttft, rate, preview, False, owner, deleted=deleted)  # fmt: skip


# The widest of each: a chat completion's id, 5-digit prompts, in_progress, a deleted one.
ROWS = [
    summary("chatcmpl-0123456789abcdef0123456789abcdef", "completed", "smollm2-135m-instruct",
            (12345, 678), 1234, 123.4, "Paris is the capital of France, in Europe",
            owner="alice"),
    summary("resp_00112233445566778899aabbccddeeff", "incomplete", "qwen3-0.6b-4bit",
            (12, 512), 85, 55.0, "Once upon a time", deleted=True, owner="ci-nightly"),
    summary("embd-ffeeddccbbaa99887766554433221100", "in_progress", None, None, None, None, "x"),
]  # fmt: skip
WHOLE = {  # each column's cells as `ls` shows them, their folded lines joined
    "ID": [r.id for r in ROWS],
    "CREATED": ["2026-12-02 10:11:12"] * 3,
    "STATUS": ["completed", "incomplete (deleted)", "in_progress"],
    "OWNER": ["alice", "ci-nightly", "-"],
    "MODEL": ["smollm2-135m-instruct", "qwen3-0.6b-4bit", "-"],
    "TOKENS": ["12345→678", "12→512", "-→-"],
    "TTFT": ["1234 ms", "85 ms", "-"],
    "TOK/S": ["123.4", "55.0", "-"],
    "PREVIEW": [r.preview for r in ROWS],
}
NEVER_FOLDED = ("ID", "TOKENS", "TTFT", "TOK/S")


def cells(header: str, lines: list[str], name: str) -> tuple[list[str], list[str]]:
    """A column's cells (a row begins where an ID does), as shown: their lines joined by
    a space, and by nothing (how a fold, which breaks inside a word, reads)."""
    found = re.search(rf"(?<!\S){re.escape(name)}(?!\S)", header)
    assert found is not None, name
    start = found.start()
    ends = [m.start() for m in re.finditer(r"(?<=\s)\S", header) if m.start() > start]
    end = ends[0] if ends else None
    rows: list[list[str]] = []
    for line in lines:
        if not line.startswith(" "):
            rows.append([])
        piece = line[start:end].strip()
        if piece:
            rows[-1].append(piece)
    return [" ".join(r) for r in rows], ["".join(r) for r in rows]


@pytest.mark.parametrize(
    ("width", "columns"),
    [
        (80, ["ID", "STATUS", "OWNER", "TOKENS", "TTFT"]),  # 41 columns of id
        (100, ["ID", "STATUS", "OWNER", "MODEL", "TOKENS", "TTFT"]),
        (180, list(WHOLE)),
    ],
)
def test_ls_keeps_ids_and_numbers_whole_and_drops_whole_columns(
    width: int, columns: list[str]
) -> None:
    stream = io.StringIO()
    ls_table(Out(stream, pretty=True, width=width), ROWS)
    # An id is a token of its own, to paste into `omni show`.
    assert all(row.id in stream.getvalue().split() for row in ROWS)
    header, rule, *lines = stream.getvalue().splitlines()
    assert all(cell_len(line) <= width for line in [header, rule, *lines])
    # What cannot fit is left out, in the stated order (PREVIEW, CREATED, TOK/S, MODEL, TTFT),
    # not blanked.
    assert header.split() == columns
    for name in columns:
        spaced, joined = cells(header, lines, name)
        assert WHOLE[name] in (spaced, joined), name  # folded perhaps, never cut
        if name in NEVER_FOLDED or width == 180:  # one line each (at 180, room for all)
            assert spaced == WHOLE[name], name


def test_a_terminal_narrower_than_the_ids_gets_them_whole_on_longer_lines() -> None:
    stream = io.StringIO()
    ls_table(Out(stream, pretty=True, width=50), ROWS)
    tokens = stream.getvalue().split()
    assert all(row.id in tokens for row in ROWS)  # the terminal wraps the lines; no id is cut
    assert all(number in tokens for number in ("12345→678", "12→512"))


def test_the_tokens_a_prefix_cache_read_from_disk_are_read_from_the_last_event() -> None:
    usage = {"input_tokens": 90, "input_tokens_details": {"cached_tokens": 80,
             "omni_disk_cached_tokens": 64}}  # fmt: skip
    response = [
        ("response.created", "{}"),
        ("response.completed", json.dumps({"response": {"usage": usage}})),
    ]
    chunk = {"usage": {"prompt_tokens_details": {"cached_tokens": 9, "omni_disk_cached_tokens": 5}}}
    assert disk_cached(response) == 64
    assert disk_cached([("chat.completion.chunk", json.dumps(chunk))]) == 5
    plain = {"response": {"usage": {"input_tokens_details": {"cached_tokens": 80}}}}
    assert disk_cached([("response.completed", json.dumps(plain))]) == 0
    assert disk_cached([]) == 0


def test_a_narrow_column_dropped_early_comes_back_where_a_wide_one_made_room() -> None:
    columns = [Column("ID", None), Column("N", None, drop=1), Column("TEXT", fold=30, drop=2)]
    layout = fit(columns, [("x" * 40, "12", "y" * 30)], 50)
    assert layout.shown == (0, 1) and layout.width <= 50
