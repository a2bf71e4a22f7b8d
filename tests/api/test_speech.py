"""POST /v1/audio/speech end to end: the OpenAI SDK against a real server whose model pool
loads a tiny random-weight Kokoro on demand (mlx-audio's own loader, espeak-ng's phonemes,
PyAV's encoders), each format decoded back by PyAV; streamed bytes, SSE events, refusals in
OpenAI's shape, and the requests in the log (on SQLite and on PostgreSQL), the inspector and
`omni ls` / `omni show`.

The tiny Kokoro speaks each phoneme for exactly one frame of 600 samples at 24 kHz (two at
half speed), plus a frame at each end: a request's length is foretold by the input tokens
it records."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import av
import httpx
import openai
import pytest

from omni.api.app import Settings
from omni.inspect import Inspector, open_log
from omni.runtime.loading.catalogue import scan
from omni.runtime.loading.loader import Loader
from omni.service.models import Models
from omni.testing.kokoro import FRAME, SAMPLE_RATE, VOICE
from tests.api.test_metrics import scrape, value
from tests.server import ServerThread
from tests.test_cli import omni

SPEAKER, CHAT = "tiny-kokoro", "tiny-llama"
SAID = "Hola."
# A codec's own padding: mp3 and aac add priming frames (up to ~0.1 s here).
SLACK_S = 0.12


@contextmanager
def serving(
    models_from: tuple[Path, Path], root: Path, db: str, *, chat_loaded: bool = True
) -> Iterator[ServerThread]:
    """A server on log `db` whose catalogue holds the tiny llama (loaded first,
    unless `chat_loaded` is False) and the tiny Kokoro (loaded on its first request)."""
    shelf = root / "shelf"
    for folder, name in zip(models_from, (CHAT, SPEAKER), strict=True):
        shutil.copytree(folder, shelf / name)
    home = root / "home"
    models = Models(scan(home, [shelf]), Loader(home), default=CHAT,
                    aliases={"gpt-4o-mini-tts": SPEAKER})  # fmt: skip
    if chat_loaded:  # else loaded on demand, as any other
        chat = Loader(home)(models.find(CHAT))
        chat.wait_loaded()
        models.adopt(chat)
    srv = ServerThread(Settings(db_path=db), models).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def served(
    tiny_model_dir: Path, tiny_kokoro_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerThread, openai.OpenAI, Path]]:
    root = tmp_path_factory.mktemp("speech")
    db = root / "omni.db"
    with serving((tiny_model_dir, tiny_kokoro_dir), root, str(db)) as srv:
        with openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0) as client:
            yield srv, client, db


def decoded(data: bytes, response_format: str) -> tuple[str, int, float]:
    """(codec, sample rate, seconds) of a file, as PyAV decodes it; pcm is raw 16-bit."""
    if response_format == "pcm":
        return "pcm", SAMPLE_RATE, len(data) / 2 / SAMPLE_RATE
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return stream.codec_context.name, stream.sample_rate, samples / stream.sample_rate


def ending(db: Path, sid: str) -> dict[str, Any]:
    with sqlite3.connect(db) as conn:
        (data,) = conn.execute(
            "SELECT data FROM events WHERE stream_id = ? AND seq = 1", (sid,)
        ).fetchone()
    return json.loads(data)  # type: ignore[no-any-return]


def foretold(tokens: int, speed: float = 1.0) -> float:
    return (tokens + 2) * FRAME * (2 if speed < 1 else 1) / SAMPLE_RATE


@pytest.mark.parametrize(
    ("response_format", "codec", "rate"),
    [
        ("mp3", "mp3float", 24000),
        ("opus", "opus", 48000),  # Opus decodes at 48 kHz whatever it was given
        ("aac", "aac", 24000),
        ("flac", "flac", 24000),
        ("wav", "pcm_s16le", 24000),
        ("pcm", "pcm", 24000),
    ],
)
def test_each_format_decodes_as_audio_of_its_rate_and_length(
    served, response_format: str, codec: str, rate: int
) -> None:
    _, client, db = served
    answer = client.audio.speech.create(
        model=SPEAKER, voice=VOICE, input=SAID, response_format=response_format
    )
    data = answer.content
    got_codec, got_rate, seconds = decoded(data, response_format)
    sid = answer.response.headers["x-omni-speech-id"]
    end = ending(db, sid)
    assert (got_codec, got_rate) == (codec, rate)
    assert end["usage"]["input_tokens"] > 0 and end["bytes"] == len(data)
    assert end["duration_s"] == pytest.approx(foretold(end["usage"]["input_tokens"]), abs=1e-3)
    assert seconds == pytest.approx(end["duration_s"], abs=SLACK_S)
    assert answer.response.headers["content-type"].startswith("audio/")


def test_streamed_bytes_at_half_speed_last_twice_as_long(served) -> None:
    _, client, db = served
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice=VOICE, input=SAID, response_format="wav", speed=0.5
    ) as streamed:
        assert streamed.headers["content-type"] == "audio/wav"
        data = b"".join(streamed.iter_bytes())
        sid = streamed.headers["x-omni-speech-id"]
    _, rate, seconds = decoded(data, "wav")
    end = ending(db, sid)
    assert rate == SAMPLE_RATE and end["model"] == SPEAKER
    assert seconds == pytest.approx(foretold(end["usage"]["input_tokens"], 0.5), abs=1e-3)


def test_sse_sends_each_line_as_it_is_spoken_then_done_with_usage(served) -> None:
    _, client, db = served
    with client.audio.speech.with_streaming_response.create(
        model=SPEAKER, voice=VOICE, input=f"{SAID}\nAdiós.", response_format="wav",
        stream_format="sse",
    ) as streamed:  # fmt: skip
        assert streamed.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in streamed.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    types = [e["type"] for e in events]
    # Kokoro speaks line by line: each line's audio is sent once it is spoken.
    assert types == ["speech.audio.delta"] * (len(types) - 1) + ["speech.audio.done"]
    assert len(types) >= 3
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    codec, rate, seconds = decoded(audio, "wav")
    usage = events[-1]["usage"]
    assert (codec, rate) == ("pcm_s16le", SAMPLE_RATE) and usage["input_tokens"] > 0
    ends = 2 * FRAME / SAMPLE_RATE  # the second line's own frame at each end
    assert seconds == pytest.approx(foretold(usage["input_tokens"]) + ends, abs=1e-3)
    assert ending(db, streamed.headers["x-omni-speech-id"])["segments"] == 2  # one a line


LINES = 6


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
def test_a_client_that_leaves_stops_the_model(served, stream_format: str) -> None:
    """Six lines, one segment each; the client leaves at its first audio: the model stops
    after the line it is speaking, and the log's ending says so and how much it spoke."""
    srv, _, db = served
    with httpx.stream(
        "POST",
        f"{srv.base_url}/v1/audio/speech",
        json={"model": SPEAKER, "voice": VOICE, "input": "\n".join([SAID] * LINES),
              "response_format": "wav", "stream_format": stream_format},
        timeout=120,
    ) as res:  # fmt: skip
        assert res.status_code == 200
        sid = res.headers["x-omni-speech-id"]
        next(res.iter_raw())
    for _ in range(1200):  # the model stops at its next line's end
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT status FROM speeches WHERE id = ?", (sid,)).fetchone()
        if row != ("in_progress",):
            break
        time.sleep(0.1)
    assert row == ("cancelled",)
    end = ending(db, sid)
    assert end["error"]["code"] == "cancelled" and end["spoken"]["stopped"] is True
    assert 1 <= end["spoken"]["segments"] < LINES


def test_metrics_count_them_by_status_with_the_audio_spoken(served) -> None:
    srv, client, db = served
    before = scrape(srv)
    answer = client.audio.speech.create(model=SPEAKER, voice=VOICE, input=SAID)
    sid = answer.response.headers["x-omni-speech-id"]
    after = scrape(srv)  # its ending is written before its answer's body ends

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("omni_speech_requests_total", status="completed") == 1
    assert moved("omni_speech_requests_total", status="cancelled") == 0
    spoken = moved("omni_speech_audio_seconds_total")
    assert spoken == pytest.approx(ending(db, sid)["duration_s"], abs=1e-3) and spoken > 0
    assert moved("omni_speech_request_seconds_count") == 1


@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"input": ""}, 400, "input"),
        ({"input": "a" * 4097}, 400, "input"),
        ({"voice": "af_nobody"}, 400, "voice"),
        ({"response_format": "ogg"}, 400, "response_format"),
        ({"speed": 5}, 400, "speed"),
        ({"instructions": "Whisper."}, 400, "instructions"),
        ({"model": CHAT}, 400, "model"),
        ({"model": "no-such-model"}, 404, "model"),
    ],
)
def test_refusals_in_openais_shape(served, fields: dict[str, Any], status: int, param: str) -> None:
    srv, _, _ = served
    body = {"model": SPEAKER, "voice": VOICE, "input": SAID, **fields}
    answer = httpx.post(f"{srv.base_url}/v1/audio/speech", json=body, timeout=60)
    error = answer.json()["error"]
    assert answer.status_code == status and error["param"] == param
    assert error["type"] == "invalid_request_error" and error["message"]
    if param == "voice":
        assert VOICE in error["message"]  # the model's voices, named


def test_a_speech_model_is_listed_as_one_and_is_not_a_chat_model(served) -> None:
    _, client, _ = served
    assert getattr(client.models.retrieve(SPEAKER), "kind") == "speech"  # noqa: B009
    with pytest.raises(openai.BadRequestError, match="speech model"):
        client.responses.create(model=SPEAKER, input="Hola")


def test_the_log_and_the_inspector_see_them(served) -> None:
    _, client, db = served
    answer = client.audio.speech.create(model=SPEAKER, voice=VOICE, input=SAID,
                                        response_format="mp3")  # fmt: skip
    sid = answer.response.headers["x-omni-speech-id"]
    assert sid.startswith("spch-")
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT model, status, voice, response_format, input_chars, bytes, duration_s > 0"
            " FROM speeches WHERE id = ?",
            (sid,),
        ).fetchone()
        types = conn.execute(
            "SELECT type FROM events WHERE stream_id IN (?, ?) ORDER BY position",
            (sid, f"{sid}/request"),
        ).fetchall()
    assert row == (SPEAKER, "completed", VOICE, "mp3", len(SAID), len(answer.content), 1)
    assert types == [("omni.request.accepted",), ("speech.in_progress",), ("speech.completed",)]
    engine = open_log(str(db))
    try:
        with engine.connect() as conn:
            ins = Inspector(conn)
            listed = {s.id: s for s in ins.recent(kind="speech", limit=50)}
            assert listed[sid].status == "completed" and listed[sid].preview == SAID
            detail = ins.detail(sid)
            assert detail is not None and detail.request["input"][0]["text"] == SAID
            assert detail.output_text.endswith(f"s of audio, {len(answer.content)} bytes")
    finally:
        engine.dispose()
    listed_by_cli = omni("ls", "--db", str(db), "--kind", "speech")
    shown = omni("show", sid, "--db", str(db))
    assert listed_by_cli.returncode == 0 and sid in listed_by_cli.stdout
    assert shown.returncode == 0 and "s of audio" in shown.stdout and SAID in shown.stdout


def test_without_the_audio_extra_speech_is_a_501_saying_how_to_install_it(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, _, _ = served
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mlx_audio" else found(name, *a),
    )
    body = {"model": SPEAKER, "voice": VOICE, "input": SAID}
    answer = httpx.post(f"{srv.base_url}/v1/audio/speech", json=body, timeout=60)
    assert answer.status_code == 501
    assert "pip install 'omni-mlx[audio]'" in answer.json()["error"]["message"]


def test_on_postgresql_a_speech_is_in_its_log(
    tiny_model_dir: Path, tiny_kokoro_dir: Path, tmp_path: Path, pg_url: str
) -> None:
    from tests.postgres import rows

    with serving((tiny_model_dir, tiny_kokoro_dir), tmp_path, pg_url, chat_loaded=False) as srv:
        with openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0) as client:
            answer = client.audio.speech.create(model=SPEAKER, voice=VOICE, input=SAID,
                                                response_format="opus")  # fmt: skip
    sid = answer.response.headers["x-omni-speech-id"]
    _, rate, seconds = decoded(answer.content, "opus")
    query = "SELECT status, voice, bytes, duration_s FROM speeches WHERE id = %s"
    (row,) = rows(pg_url, query, sid)
    assert row[:3] == ("completed", VOICE, len(answer.content))
    assert rate == 48000 and seconds == pytest.approx(row[3], abs=SLACK_S)
