"""A transcript in each of OpenAI's response formats, and as a stream's deltas (pure)."""

from __future__ import annotations

from typing import Any

from omni.protocol import transcripts

RESULT: dict[str, Any] = {
    "text": "Hello there. General Kenobi.",
    "language": "en",
    "segments": [
        {"id": 0, "seek": 0, "start": 0.0, "end": 1.5, "text": " Hello there.", "tokens": [1, 2],
         "temperature": 0.0, "avg_logprob": -0.2, "compression_ratio": 1.0,
         "no_speech_prob": 0.01, "words": [{"word": " Hello", "start": 0.0, "end": 0.7},
                                           {"word": " there.", "start": 0.7, "end": 1.5}]},
        {"id": 1, "seek": 0, "start": 61.25, "end": 3723.5, "text": " General Kenobi.",
         "tokens": [3], "temperature": 0.0, "avg_logprob": -0.3, "compression_ratio": 1.0,
         "no_speech_prob": 0.02, "words": []},
    ],
}  # fmt: skip


def test_deltas_join_into_the_done_text() -> None:
    deltas = transcripts.deltas(RESULT)
    assert [d["delta"] for d in deltas] == ["Hello there.", " General Kenobi."]
    done = transcripts.done(RESULT, 2.0)
    assert done["text"] == "Hello there. General Kenobi."
    assert done["usage"]["input_tokens"] == 100 and done["usage"]["output_tokens"] == 3


def test_srt_and_vtt_cues() -> None:
    srt, kind = transcripts.answer(RESULT, "srt", 3724.0, "transcribe", False)
    assert kind.startswith("text/plain")
    assert srt == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n"
        "2\n00:01:01,250 --> 01:02:03,500\nGeneral Kenobi.\n\n"
    )
    vtt, kind = transcripts.answer(RESULT, "vtt", 3724.0, "transcribe", False)
    assert kind.startswith("text/vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n00:01:01.250")


def test_json_text_and_verbose_json() -> None:
    assert transcripts.answer(RESULT, "text", 2.0, "transcribe", False)[0] == (
        "Hello there. General Kenobi.\n"
    )
    plain, _ = transcripts.answer(RESULT, "json", 2.0, "transcribe", False)
    assert plain == {
        "text": "Hello there. General Kenobi.",
        "usage": {"type": "duration", "seconds": 2.0},
    }
    verbose, _ = transcripts.answer(RESULT, "verbose_json", 2.0, "translate", True)
    assert isinstance(verbose, dict)
    assert (verbose["task"], verbose["language"], verbose["duration"]) == (
        "translate",
        "english",
        2.0,
    )
    assert [w["word"] for w in verbose["words"]] == [" Hello", " there."]
    assert "words" not in verbose["segments"][0]  # words are the answer's, not a segment's
    without, _ = transcripts.answer(RESULT, "verbose_json", 2.0, "transcribe", False)
    assert isinstance(without, dict) and "words" not in without
