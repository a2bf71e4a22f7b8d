"""The CLI's plain output: one event a line, whatever the text holds."""

from __future__ import annotations

import io

from omni.inspect_cli.output import Out


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
