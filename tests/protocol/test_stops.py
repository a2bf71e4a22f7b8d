"""StopMatcher: stop sequences on streamed text. The stop text is never emitted, nothing after
a stop is emitted, text that only looked like the start of a stop is released later."""

from __future__ import annotations

import random

import pytest

from omni.protocol.stops import StopMatcher


def run(stops: list[str], pieces: list[str]) -> tuple[str, StopMatcher]:
    """Feed the pieces, flush, and return everything emitted."""
    m = StopMatcher(stops)
    out = "".join(m.feed(p) for p in pieces)
    return out + m.flush(), m


def expected(stops: list[str], text: str) -> str:
    """The reference: the text up to the earliest occurrence of any stop."""
    hits = [text.find(s) for s in stops if s and s in text]
    return text[: min(hits)] if hits else text


def test_no_stops_passes_text_through_unchanged() -> None:
    m = StopMatcher([])
    assert m.feed("hello") == "hello"
    assert m.feed(" world") == " world"
    assert m.flush() == ""
    assert not m.stopped


def test_empty_stop_strings_are_ignored() -> None:
    m = StopMatcher(["", ""])
    assert m.stops == []
    assert m.feed("abc") == "abc"
    assert not m.stopped


def test_stop_inside_one_chunk() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("hello STOP world") == "hello "
    assert m.stopped
    assert m.flush() == ""


def test_stop_at_the_very_start_emits_nothing() -> None:
    m = StopMatcher(["ab"])
    assert m.feed("abc") == ""
    assert m.stopped
    assert m.flush() == ""


def test_stop_split_across_two_chunks() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("abc ST") == "abc "  # "ST" may be a stop's start: held back
    assert not m.stopped
    assert m.feed("OP more") == ""
    assert m.stopped
    assert m.flush() == ""


def test_stop_split_across_many_single_character_chunks() -> None:
    out, m = run(["<end>"], list("one two <end> three"))
    assert out == "one two "
    assert m.stopped


def test_partial_match_that_turns_out_not_a_stop_is_released() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("abc ST") == "abc "
    assert m.feed("ART") == "START"
    assert not m.stopped
    assert m.flush() == ""


def test_flush_releases_a_held_partial_non_stop() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("abc STO") == "abc "
    assert m.flush() == "STO"
    assert not m.stopped


def test_multiple_stops_the_earliest_in_the_text_wins() -> None:
    m = StopMatcher(["world", "lo"])
    assert m.feed("hello world") == "hel"
    assert m.stopped


def test_multiple_stops_earliest_wins_even_if_listed_last() -> None:
    out, _ = run(["zzz", "b", "a"], ["xxab"])
    assert out == "xx"


def test_earliest_wins_across_a_chunk_boundary() -> None:
    # "E" is held as the start of "END"; then "ND" completes both "END" (at 0) and "ND" (at 1).
    m = StopMatcher(["END", "ND"])
    assert m.feed("aE") == "a"
    assert m.feed("ND") == ""
    assert m.stopped


def test_longer_stop_starting_earlier_beats_shorter_one_completed_first() -> None:
    # "abcd" starts at 0 and "cd" at 2: the text before the earliest start is emitted.
    out, _ = run(["cd", "abcd"], ["xab", "cd"])
    assert out == "x"


def test_overlapping_prefix_repeats() -> None:
    out, m = run(["aab"], ["aa", "aab"])
    assert out == "aa"
    assert m.stopped


def test_nothing_is_emitted_after_a_stop() -> None:
    m = StopMatcher(["."])
    assert m.feed("one. two") == "one"
    assert m.feed("three") == ""
    assert m.feed("four.") == ""
    assert m.flush() == ""


def test_unicode_stop() -> None:
    out, m = run(["é!"], ["caf", "é", "! fin"])
    assert out == "caf"
    assert m.stopped


def test_stop_longer_than_all_text_is_released_at_flush() -> None:
    out, m = run(["a-very-long-stop"], ["a-", "very"])
    assert out == "a-very"
    assert not m.stopped


@pytest.mark.parametrize("seed", range(40))
def test_any_split_of_the_text_gives_the_reference_result(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "abc "
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
    stops = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(2)]
    cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(0, 8))))
    pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    out, m = run(stops, pieces)
    assert out == expected(stops, text), (stops, pieces)
    assert m.stopped == any(s in text for s in stops)
    # Never emitted: any stop text.
    assert not any(s in out for s in stops)
