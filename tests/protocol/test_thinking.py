"""ThinkSplitter: the think block out of streamed text, however the text is cut."""

from __future__ import annotations

import pytest

from omni.protocol.thinking import Part, ThinkSplitter


def run(pieces: list[str], inside: bool) -> list[Part]:
    splitter = ThinkSplitter("<think>", "</think>", inside=inside)
    parts: list[Part] = []
    for piece in pieces:
        parts += splitter.feed(piece)
    parts += splitter.finish()
    merged: list[Part] = []
    for kind, text in parts:  # adjacent parts of one kind are one stream
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return merged


CASES = [
    # (output, prompt opened the block, expected)
    ("hmm, 2+2</think>\n\nIt is 4.", True, [("reasoning", "hmm, 2+2"), ("text", "It is 4.")]),
    ("<think>plan</think>Answer", False, [("reasoning", "plan"), ("text", "Answer")]),
    ("  \n<think>x</think>y", False, [("reasoning", "x"), ("text", "y")]),
    (
        "No block here, <think> later is text",
        False,
        [("text", "No block here, <think> later is text")],
    ),
    ("cut off while thinking", True, [("reasoning", "cut off while thinking")]),
    ("<thin", False, [("text", "<thin")]),
]


@pytest.mark.parametrize(("output", "inside", "expected"), CASES)
def test_every_cut_gives_the_same_parts(output: str, inside: bool, expected: list[Part]) -> None:
    assert run([output], inside) == expected
    assert run(list(output), inside) == expected
    for cut in range(1, len(output)):
        assert run([output[:cut], output[cut:]], inside) == expected, cut


def test_markers_never_leak_while_streaming() -> None:
    splitter = ThinkSplitter("<think>", "</think>", inside=True)
    released = [splitter.feed(c) for c in "abc</think>done"]
    text = "".join(t for parts in released for _, t in parts)
    assert "<" not in text and text == "abcdone"
