"""fold_response: the Response a client retrieves, folded from the stored events."""

from __future__ import annotations

import json

import pytest

from omni.ports.jobs import Delta, Failed, Finished
from omni.projections.response import fold_response
from tests.projections._events import as_rows, record

RUNS = {
    "completed": [
        Delta("Hel", 1),
        Delta("lo ", 2),
        Delta("wörld \ufffd", 3),
        Finished("stop", 5, 3),
    ],
    "incomplete": [Delta("a", 1), Delta("b", 2), Finished("length", 5, 2)],
    "empty": [Finished("stop", 5, 0)],
    "failed": [Delta("x", 1), Failed("boom")],
}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_fold_with_terminal_returns_the_terminal_response(run: str) -> None:
    _, events = record(RUNS[run])
    rows = as_rows(events)
    assert fold_response(rows) == events[-1]["response"]


@pytest.mark.parametrize("run", sorted(RUNS))
def test_fold_without_terminal_equals_the_terminal_output(run: str) -> None:
    """Every item event folded in gives the same output the terminal response carries."""
    _, events = record(RUNS[run])
    folded = fold_response(as_rows(events[:-1]))
    assert folded["output"] == events[-1]["response"]["output"]
    assert folded["id"] == events[-1]["response"]["id"]
    assert folded["status"] == "in_progress"


def test_fold_of_every_prefix_shows_the_text_so_far() -> None:
    _, events = record(RUNS["completed"])
    rows = as_rows(events)
    for k in range(1, len(rows)):
        folded = fold_response(rows[:k])
        assert folded["status"] == "in_progress"
        text = "".join(e["delta"] for e in events[:k] if e["type"] == "response.output_text.delta")
        if k <= 2:  # only created / in_progress so far
            assert folded["output"] == []
            continue
        assert len(folded["output"]) == 1
        item = folded["output"][0]
        assert item["id"] == events[2]["item"]["id"]
        if k == 3:  # output_item.added only: no part yet
            assert item["content"] == []
            continue
        assert item["content"][0]["text"] == text


def test_in_progress_fold_item_status() -> None:
    _, events = record(RUNS["completed"])
    mid = fold_response(as_rows(events[:5]))  # after the first delta
    assert mid["output"][0]["status"] == "in_progress"
    assert mid["output"][0]["content"][0] == {
        "type": "output_text",
        "text": "Hel",
        "annotations": [],
        "logprobs": [],
    }


def test_fold_is_pure() -> None:
    _, events = record(RUNS["incomplete"])
    rows = as_rows(events[:-1])
    first = fold_response(rows)
    assert fold_response(rows) == first
    assert [json.loads(d) for _, d in rows] == events[:-1]


def test_fold_of_nothing_is_empty() -> None:
    assert fold_response([]) == {}


def test_fold_continues_after_created_only() -> None:
    _, events = record(RUNS["completed"])
    folded = fold_response(as_rows(events[:1]))
    assert folded["output"] == [] and folded["id"] == events[0]["response"]["id"]
