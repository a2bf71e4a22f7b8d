"""POST /v1/audio/transcriptions and /translations end to end: espeak-ng speaks a known
sentence, the OpenAI SDK sends it (wav, and flac made from it by PyAV) to a real server whose
real Whisper tiny.en (the default, converted from its wheel) hears it, plain and streamed, in
every response_format; the log, the view and the inspector see them; a replay sends the same
bytes. The server's model pool is not this test's: a minimal one serves the transcriber."""

from __future__ import annotations

import io
import json
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from omni.api.gate import Access
from omni.errors import InvalidRequest, ModelNotFound
from omni.inspect import Inspector, open_log
from omni.runtime.transcription.default import DEFAULT_TRANSCRIPTION_ID
from omni.runtime.transcription.engine import MLXTranscriber
from omni.service.transcriptions import TranscriptionsService
from tests.api._helpers import MODEL
from tests.api.test_metrics import scrape, value
from tests.server import running

SENTENCE = "Please open the door and turn on the lights."


class OneTranscriber:
    """A stand-in for the model pool: one transcription model, an alias, a chat model."""

    def __init__(self, transcriber: MLXTranscriber) -> None:
        self.transcriber = transcriber

    @asynccontextmanager
    async def use_transcriber(self, name: str | None) -> AsyncIterator[MLXTranscriber]:
        if name in (None, DEFAULT_TRANSCRIPTION_ID, "whisper-1"):
            yield self.transcriber
            return
        if name == MODEL:
            raise InvalidRequest(
                f"The model '{name}' is a chat model, not a transcription model.", param="model"
            )
        raise ModelNotFound(f"The model '{name}' does not exist.", param="model")


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def heard(text: str) -> float:
    """How much of SENTENCE's words the text has, in order (1.0: all)."""
    return SequenceMatcher(None, words(SENTENCE), words(text)).ratio()


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """SENTENCE spoken by espeak-ng as wav, and the same as flac (encoded by PyAV)."""
    import av

    espeak = shutil.which("espeak-ng")
    assert espeak is not None, "the tests need espeak-ng (Debian's espeak-ng)"
    wav = tmp_path_factory.mktemp("speech") / "sentence.wav"
    subprocess.run([espeak, "-s", "150", "-w", str(wav), SENTENCE], check=True)
    flac = io.BytesIO()
    with av.open(str(wav)) as src, av.open(flac, "w", format="flac") as out:
        stream = out.add_stream("flac", rate=src.streams.audio[0].rate)
        for frame in src.decode(audio=0):
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return {"wav": wav.read_bytes(), "flac": flac.getvalue()}


@pytest.fixture(scope="module")
def served(
    tiny_engine: Any, whisper_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, openai.OpenAI, Path]]:
    transcriber = MLXTranscriber(str(whisper_dir), DEFAULT_TRANSCRIPTION_ID)
    transcriber.start()
    db = tmp_path_factory.mktemp("transcriptions") / "omni.db"
    try:
        with running(tiny_engine, db) as (srv, client):
            state = srv.state
            state.transcriptions = TranscriptionsService(
                state.store,
                state.appender,
                state.notifier,
                OneTranscriber(transcriber),
                metrics=state.metrics,
            )
            yield srv, client, db
    finally:
        transcriber.close()


def test_the_sdk_hears_the_sentence_in_wav_and_flac(served, speech) -> None:
    _, client, db = served
    plain = client.audio.transcriptions.create(
        model="whisper-1", file=("sentence.wav", speech["wav"], "audio/wav")
    )
    assert heard(plain.text) >= 0.8, plain.text
    verbose = client.audio.transcriptions.create(
        model=DEFAULT_TRANSCRIPTION_ID,
        file=("sentence.flac", speech["flac"], "audio/flac"),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    assert heard(verbose.text) >= 0.8, verbose.text
    assert verbose.language == "english" and 1.0 < verbose.duration < 8.0
    segments = verbose.segments or []
    assert segments and all(s.start <= s.end <= verbose.duration + 0.5 for s in segments)
    assert [w.word.strip() for w in verbose.words or []][:2] == plain.text.split()[:2]
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT model, status, task, audio_bytes, input_tokens > 0, output_tokens > 0, text"
            " FROM transcriptions ORDER BY created_ms"
        ).fetchall()
        request = json.loads(
            conn.execute(
                "SELECT data FROM events WHERE stream_id = (SELECT id || '/request' FROM"
                " transcriptions ORDER BY created_ms DESC LIMIT 1)"
            ).fetchone()[0]
        )
    assert rows[-2:] == [
        (DEFAULT_TRANSCRIPTION_ID, "completed", "transcribe", len(speech["wav"]), 1, 1, plain.text),
        (DEFAULT_TRANSCRIPTION_ID, "completed", "transcribe", len(speech["flac"]), 1, 1,
         verbose.text),
    ]  # fmt: skip
    assert request["audio"]["format"] == "flac" and len(request["audio"]["sha256"]) == 64
    assert "file" not in request["body"] and request["body"]["timestamp_granularities"] == [
        "word",
        "segment",
    ]


def test_a_stream_sends_the_text_then_done_and_replays_the_same(served, speech) -> None:
    srv, client, db = served
    events = list(
        client.audio.transcriptions.create(
            model="whisper-1", file=("sentence.wav", speech["wav"]), stream=True
        )
    )
    types = [e.type for e in events]
    assert types[-1] == "transcript.text.done" and set(types[:-1]) == {"transcript.text.delta"}
    text = "".join(e.delta for e in events[:-1])  # type: ignore[union-attr]
    assert text == events[-1].text and heard(text) >= 0.8  # type: ignore[union-attr]
    with sqlite3.connect(db) as conn:
        (tid,) = conn.execute(
            "SELECT id FROM transcriptions ORDER BY created_ms DESC LIMIT 1"
        ).fetchone()
        stored = [t for (t,) in conn.execute(
            "SELECT type FROM events WHERE stream_id = ? ORDER BY seq", (tid,)
        )]  # fmt: skip
    assert tid.startswith("trsc-")
    assert stored == ["transcription.in_progress", "transcription.window", *types[:-1],
                      "transcription.segments", types[-1]]  # fmt: skip
    live = httpx.get(f"{srv.base_url}/v1/audio/transcriptions/{tid}?stream=true", timeout=30)
    assert live.headers["content-type"].startswith("text/event-stream")
    assert [json.loads(line[6:])["type"] for line in live.text.splitlines()
            if line.startswith("data: ")] == types  # fmt: skip
    again = httpx.get(f"{srv.base_url}/v1/audio/transcriptions/{tid}", timeout=30).json()
    assert again["text"] == text and again["segments"]


@pytest.mark.parametrize("fmt", ["text", "srt", "vtt"])
def test_text_srt_and_vtt(served, speech, fmt: str) -> None:
    _, client, _ = served
    out = client.audio.transcriptions.create(
        model="whisper-1", file=("sentence.wav", speech["wav"]), response_format=fmt
    )
    assert isinstance(out, str) and heard(out) >= 0.8, out
    if fmt == "srt":
        assert out.startswith("1\n00:00:00,000 --> 00:00:0")
    if fmt == "vtt":
        assert out.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:0")


def test_a_translation_of_english_is_english(served, speech) -> None:
    _, client, db = served
    out = client.audio.translations.create(model="whisper-1", file=("s.wav", speech["wav"]))
    assert heard(out.text) >= 0.8, out.text
    with sqlite3.connect(db) as conn:
        (task,) = conn.execute(
            "SELECT task FROM transcriptions ORDER BY created_ms DESC LIMIT 1"
        ).fetchone()
    assert task == "translate"


def test_what_is_not_audio_is_a_400_and_nothing_is_written(served) -> None:
    _, client, db = served
    with sqlite3.connect(db) as conn:
        (before,) = conn.execute("SELECT count(*) FROM events").fetchone()
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(
            model="whisper-1", file=("notes.txt", b"these are not the sounds you seek" * 50)
        )
    body = err.value.body
    assert isinstance(body, dict) and body["param"] == "file" and "notes.txt" in body["message"]
    with pytest.raises(openai.BadRequestError) as chat:
        client.audio.transcriptions.create(model=MODEL, file=("s.wav", b"RIFF"))
    assert isinstance(chat.value.body, dict) and chat.value.body["param"] == "model"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (before,)


def test_too_large_is_a_413(tiny_engine: Any, tmp_path: Path, speech) -> None:
    small = Access(max_body_bytes=16 * 1024)  # --max-body-mb, made smaller than the speech
    with running(tiny_engine, tmp_path / "omni.db", access=small) as (_, client):
        with pytest.raises(openai.APIStatusError) as err:
            client.audio.transcriptions.create(model="whisper-1", file=("s.wav", speech["wav"]))
    assert err.value.status_code == 413
    assert isinstance(err.value.body, dict) and err.value.body["code"] == "request_too_large"


def test_the_inspector_lists_and_shows_them(served, speech) -> None:
    srv, client, db = served
    said = client.audio.transcriptions.create(model="whisper-1", file=("s.wav", speech["wav"]))
    engine = open_log(str(db))
    try:
        with engine.connect() as conn:
            ins = Inspector(conn)
            (latest,) = ins.recent(kind="transcription", limit=1)
            assert (latest.model, latest.status) == (DEFAULT_TRANSCRIPTION_ID, "completed")
            assert latest.preview.split()[:3] == said.text.split()[:3]
            detail = ins.detail(latest.id)
            assert detail is not None and detail.request["model"] == "whisper-1"
            assert "s.wav" in detail.request["input"][0]["text"]
    finally:
        engine.dispose()
    listed = httpx.get(f"{srv.base_url}/inspect/api/recent?limit=1", timeout=30).json()["data"]
    assert [(r["id"], r["kind"]) for r in listed] == [(latest.id, "transcription")]
    shown = httpx.get(f"{srv.base_url}/inspect/api/{latest.id}", timeout=30).json()
    assert shown["summary"]["preview"] == latest.preview


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": "2"}, "temperature"),
        ({"response_format": "xml"}, "response_format"),
        ({"timestamp_granularities[]": "sentence"}, "timestamp_granularities.0"),
        ({"stream": "maybe"}, "stream"),
        ({}, "file"),
    ],
)
def test_bad_fields_are_400s_naming_them(served, fields: dict[str, str], param: str) -> None:
    srv, _, _ = served
    files = {"file": ("s.wav", b"RIFF")} if param != "file" else {"other": ("x", b"x")}
    res = httpx.post(
        f"{srv.base_url}/v1/audio/transcriptions",
        data={"model": "whisper-1", **fields},
        files=files,
        timeout=30,
    )
    assert res.status_code == 400, res.text
    assert res.json()["error"]["param"] == param


def test_a_client_that_leaves_still_leaves_a_whole_record(served, speech) -> None:
    srv, _, db = served
    with sqlite3.connect(db) as conn:
        (before,) = conn.execute("SELECT count(*) FROM transcriptions").fetchone()
    with pytest.raises(httpx.TimeoutException):  # gone before Whisper is done
        httpx.post(
            f"{srv.base_url}/v1/audio/transcriptions",
            data={"model": "whisper-1"},
            files={"file": ("s.wav", speech["wav"])},
            timeout=httpx.Timeout(30, read=0.2),
        )
    for _ in range(600):  # the transcription goes on to its end
        with sqlite3.connect(db) as conn:
            rows = conn.execute(
                "SELECT status, text FROM transcriptions ORDER BY created_ms"
            ).fetchall()
        if len(rows) > before and rows[-1][0] != "in_progress":
            break
        time.sleep(0.1)
    assert rows[-1][0] == "completed" and heard(rows[-1][1]) >= 0.8


# Spoken by espeak-ng at 150 words a minute: ~34 s, two of Whisper's 30 s windows.
PASSAGE = (
    "Please open the door and turn on the lights. The weather today is cold and windy, so"
    " bring a warm coat. We will meet at the station at nine in the morning. After lunch we"
    " can walk along the river and look at the boats. The museum closes at five, so we should"
    " arrive early. In the evening there is a concert in the park. My brother plays the violin"
    " and my sister sings in the choir. Tomorrow we travel north by train to visit our"
    " grandparents. They live in a small house near the sea, with a garden full of apple trees."
)
# ~70 s: three windows.
LONGER = PASSAGE + (
    " On Sunday the whole family cooks dinner together. My father bakes bread and my mother"
    " makes a soup of carrots and onions. The children set the table and fold the napkins."
    " After dinner we play cards by the fire until it is late. In the spring we plant"
    " tomatoes, beans and flowers in the garden. The birds build their nests in the old oak"
    " tree behind the house. Every summer we swim in the lake and sleep in a tent under the"
    " stars. When autumn comes, the leaves turn red and gold, and we gather apples for pies."
)


@pytest.fixture(scope="module")
def passages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    espeak = shutil.which("espeak-ng")
    assert espeak is not None, "the tests need espeak-ng (Debian's espeak-ng)"
    out = {}
    for name, text in (("passage", PASSAGE), ("longer", LONGER)):
        wav = tmp_path_factory.mktemp("speech") / f"{name}.wav"
        subprocess.run([espeak, "-s", "150", "-w", str(wav), text], check=True)
        out[name] = wav.read_bytes()
    return out


def _log(db: Path, tid: str) -> list[tuple[int, str, dict[str, Any]]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT position, type, data FROM events WHERE stream_id = ? ORDER BY seq", (tid,)
        ).fetchall()
    return [(p, t, json.loads(d)) for p, t, d in rows]


def _latest(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        (tid,) = conn.execute(
            "SELECT id FROM transcriptions ORDER BY created_ms DESC LIMIT 1"
        ).fetchone()
    return str(tid)


def test_a_stream_gets_each_windows_text_as_it_is_heard(served, passages) -> None:
    """Two windows: the first window's deltas are committed before the model's process said
    it had heard the last (its `transcription.window`, recorded as its message came); the
    text and segments are those of the same audio heard without a stream."""
    _, client, db = served
    events = list(
        client.audio.transcriptions.create(
            model="whisper-1", file=("passage.wav", passages["passage"]), stream=True
        )
    )
    log = _log(db, _latest(db))
    windows = [(p, d) for p, t, d in log if t == "transcription.window"]
    deltas = [(p, d) for p, t, d in log if t == "transcript.text.delta"]
    assert [d["window"] for _, d in windows] == [0, 1] and len(deltas) > 1
    assert windows[0][0] < deltas[0][0] < windows[-1][0] < deltas[-1][0]
    assert windows[-1][1]["seconds"] > 30
    text = "".join(d["delta"] for _, d in deltas)
    assert [e.delta for e in events[:-1]] == [d["delta"] for _, d in deltas]  # type: ignore[union-attr]
    assert text == events[-1].text == log[-1][2]["text"]  # type: ignore[union-attr]
    assert SequenceMatcher(None, words(PASSAGE), words(text)).ratio() >= 0.8, text
    plain = client.audio.transcriptions.create(
        model="whisper-1", file=("passage.wav", passages["passage"]),
        response_format="verbose_json",
    )  # fmt: skip
    streamed = next(d for _, t, d in log if t == "transcription.segments")
    assert plain.text == text
    assert [s.model_dump() for s in plain.segments or []] == [
        {k: v for k, v in s.items() if k != "words"} for s in streamed["segments"]
    ]


def test_a_stream_whose_client_leaves_stops_the_model(served, passages) -> None:
    """Three windows; the client leaves at the first delta: the model's process stops after
    the window it is hearing, and the log ends `cancelled` with fewer windows heard."""
    srv, _, db = served
    with httpx.stream(
        "POST",
        f"{srv.base_url}/v1/audio/transcriptions",
        data={"model": "whisper-1", "stream": "true"},
        files={"file": ("longer.wav", passages["longer"])},
        timeout=120,
    ) as res:
        for line in res.iter_lines():
            if line.startswith("data: ") and "transcript.text.delta" in line:
                break
    tid = _latest(db)
    for _ in range(1200):  # the model stops at its next window's end
        log = _log(db, tid)
        if log[-1][1] in ("transcript.text.done", "transcription.failed"):
            break
        time.sleep(0.1)
    _, end, ending = log[-1]
    assert end == "transcription.failed" and ending["error"]["code"] == "cancelled"
    heard = [d for _, t, d in log if t == "transcription.window"]
    assert log[0][2]["seconds"] > 60  # three windows, of which it heard fewer
    assert ending["windows"] == len(heard) < 3 and heard[-1]["seconds"] < 60
    with sqlite3.connect(db) as conn:
        assert conn.execute(
            "SELECT status FROM transcriptions WHERE id = ?", (tid,)
        ).fetchone() == ("cancelled",)


def test_metrics_count_them_by_task_and_status_with_the_audio_heard(served, speech) -> None:
    srv, client, db = served
    before = scrape(srv)
    client.audio.transcriptions.create(model="whisper-1", file=("s.wav", speech["wav"]))
    after = scrape(srv)
    with sqlite3.connect(db) as conn:
        (seconds,) = conn.execute(
            "SELECT audio_seconds FROM transcriptions ORDER BY created_ms DESC LIMIT 1"
        ).fetchone()

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("omni_transcriptions_total", task="transcribe", status="completed") == 1
    assert moved("omni_transcriptions_total", task="transcribe", status="failed") == 0
    heard = moved("omni_transcription_audio_seconds_total", task="transcribe")
    assert heard == pytest.approx(seconds, abs=1e-3)
    assert moved("omni_transcription_request_seconds_count", task="transcribe") == 1
    assert moved("omni_transcription_request_seconds_sum", task="transcribe") > 0
