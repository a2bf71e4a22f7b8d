"""A transcript (mlx-audio's Whisper result) as OpenAI's audio API answers it: the text, its
deltas and done event for a stream, and each response_format (json, text, srt, vtt,
verbose_json with segments and words). Pure: values in, values out."""

from __future__ import annotations

from typing import Any

from omni.vocabulary import TRANSCRIPT_DELTA, TRANSCRIPT_DONE

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
AUDIO_TOKENS_PER_S = 50  # Whisper's encoder: one audio token each 20 ms
LANGUAGE_NAMES = {"en": "english"}  # verbose_json names the language; Whisper gives its code


def deltas(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The text as a stream sends it: one `transcript.text.delta` a segment, the first without
    its leading space, so that the deltas join into the done event's text."""
    return window_deltas(result["segments"], started=False)


def window_deltas(segments: list[dict[str, Any]], started: bool) -> list[dict[str, Any]]:
    """deltas() of some segments, after others whose deltas were `started` already (the
    windows of a recording, as they are heard, join into the same deltas)."""
    out: list[dict[str, Any]] = []
    for segment in segments:
        piece = segment["text"] if out or started else segment["text"].lstrip()
        if piece:
            out.append({"type": TRANSCRIPT_DELTA, "delta": piece, "logprobs": None})
    return out


def usage(result: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Tokens heard and written, in the shape the stream's done event carries."""
    heard = round(seconds * AUDIO_TOKENS_PER_S)
    written = sum(len(s["tokens"]) for s in result["segments"])
    return {
        "type": "tokens",
        "input_tokens": heard,
        "input_token_details": {"audio_tokens": heard, "text_tokens": 0},
        "output_tokens": written,
        "total_tokens": heard + written,
    }


def done(result: dict[str, Any], seconds: float) -> dict[str, Any]:
    text = "".join(d["delta"] for d in deltas(result))
    spent = usage(result, seconds)
    return {"type": TRANSCRIPT_DONE, "text": text, "logprobs": None, "usage": spent}


def answer(
    result: dict[str, Any], response_format: str, seconds: float, task: str, words: bool
) -> tuple[str | dict[str, Any], str]:
    """The body of a non-streamed answer and its content type."""
    text = "".join(d["delta"] for d in deltas(result))
    if response_format == "text":
        return text + "\n", "text/plain; charset=utf-8"
    if response_format == "srt":
        return srt(result["segments"]), "text/plain; charset=utf-8"
    if response_format == "vtt":
        return vtt(result["segments"]), "text/vtt; charset=utf-8"
    duration = {"type": "duration", "seconds": round(seconds, 3)}
    if response_format == "json":
        return {"text": text, "usage": duration}, "application/json"
    code = result.get("language") or "en"
    body: dict[str, Any] = {
        "task": task,
        "language": LANGUAGE_NAMES.get(code, code),
        "duration": round(seconds, 3),
        "text": text,
        "segments": [{k: v for k, v in s.items() if k != "words"} for s in result["segments"]],
        "usage": duration,
    }
    if words:
        body["words"] = [w for s in result["segments"] for w in s.get("words", [])]
    return body, "application/json"


def clock(seconds: float, decimal: str) -> str:
    """12.345 → '00:00:12,345' (srt) or '00:00:12.345' (vtt)."""
    ms = round(seconds * 1000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{ms:03d}"


def srt(segments: list[dict[str, Any]]) -> str:
    cues = [
        f"{n}\n{clock(s['start'], ',')} --> {clock(s['end'], ',')}\n{s['text'].strip()}\n"
        for n, s in enumerate(segments, start=1)
    ]
    return "\n".join(cues) + ("\n" if cues else "")


def vtt(segments: list[dict[str, Any]]) -> str:
    cues = [
        f"{clock(s['start'], '.')} --> {clock(s['end'], '.')}\n{s['text'].strip()}\n"
        for s in segments
    ]
    return "WEBVTT\n\n" + "\n".join(cues)
