"""POST /v1/images/generations end to end: the OpenAI SDK against a real server whose model
pool loads a tiny random-weight FLUX.2 [klein] on demand (mflux's own loader, text encoder,
transformer, scheduler and VAE, on MLX's CPU build), each answer decoded back by Pillow;
streamed partial images, refusals in OpenAI's shape, a client that goes away, and the
requests in the log (on SQLite and on PostgreSQL), the inspector and `omni ls` / `omni show`.

The tiny model's default is 4 steps (it is step-distilled, as Klein is): medium quality draws
in 4, and 2 partial images come after steps 1 and 3."""

from __future__ import annotations

import base64
import io
import json
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from PIL import Image

from omni.api.app import Settings
from omni.inspect import Inspector, open_log
from omni.runtime.loading.catalogue import scan
from omni.runtime.loading.loader import Loader
from omni.service.models import Models
from tests.server import ServerThread
from tests.test_cli import omni

DRAWER, CHAT = "tiny-flux2", "tiny-llama"
PROMPT = "A red fox in the snow."


@contextmanager
def serving(
    models_from: tuple[Path, Path], root: Path, db: str, *, chat_loaded: bool = True
) -> Iterator[ServerThread]:
    """A server on log `db` whose catalogue holds the tiny llama (loaded first,
    unless `chat_loaded` is False) and the tiny FLUX.2 (loaded on its first request),
    which `gpt-image-1` names too."""
    shelf = root / "shelf"
    for folder, name in zip(models_from, (CHAT, DRAWER), strict=True):
        shutil.copytree(folder, shelf / name)
    home = root / "home"
    models = Models(scan(home, [shelf]), Loader(home), default=CHAT,
                    aliases={"gpt-image-1": DRAWER})  # fmt: skip
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
    tiny_model_dir: Path, tiny_flux_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerThread, openai.OpenAI, Path]]:
    root = tmp_path_factory.mktemp("images")
    db = root / "omni.db"
    with serving((tiny_model_dir, tiny_flux_dir), root, str(db)) as srv:
        with openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0,
                           _strict_response_validation=True) as client:  # fmt: skip
            yield srv, client, db


def picture(b64: str) -> Image.Image:
    image = Image.open(io.BytesIO(base64.b64decode(b64)))
    image.load()
    return image


def stream_events(db: Path, gid: str) -> list[tuple[str, dict[str, Any]]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT type, data FROM events WHERE stream_id IN (?, ?) ORDER BY position",
            (gid, f"{gid}/request"),
        ).fetchall()
    return [(t, json.loads(d)) for t, d in rows]


def test_images_come_back_as_base64_of_the_size_asked(served) -> None:
    _, client, db = served
    answer = client.images.with_raw_response.generate(
        model=DRAWER, prompt=PROMPT, n=2, size="64x48", quality="low"
    )
    gid = answer.headers["x-omni-image-id"]
    result = answer.parse()
    assert result.data is not None and len(result.data) == 2
    for image in result.data:
        assert image.b64_json is not None and image.url is None
        drawn = picture(image.b64_json)
        assert (drawn.format, drawn.size, drawn.mode) == ("PNG", (64, 48), "RGB")
    assert (result.size, result.quality, result.output_format) == ("64x48", "low", "png")
    assert result.background == "opaque"
    assert result.usage is not None and result.usage.input_tokens > 0
    assert result.usage.output_tokens == 2 * (64 // 16) * (48 // 16)  # its latent patches
    assert result.usage.total_tokens == result.usage.input_tokens + result.usage.output_tokens
    events = stream_events(db, gid)
    request = events[0][1]
    assert request["steps"] == 2 and request["size"] == "64x48"  # low: half the model's 4
    seeds = [data["seed"] for type_, data in events if type_ == "images.image"]
    assert seeds == [request["seed"], request["seed"] + 1]


@pytest.mark.parametrize(("output_format", "pillow"), [("jpeg", "JPEG"), ("webp", "WEBP")])
def test_each_format_decodes_as_itself(served, output_format: str, pillow: str) -> None:
    _, client, _ = served
    result = client.images.generate(
        model="gpt-image-1", prompt=PROMPT, size="48x32", output_format=output_format,
        output_compression=60,
    )  # fmt: skip
    assert result.data is not None and result.data[0].b64_json is not None
    drawn = picture(result.data[0].b64_json)
    assert (drawn.format, drawn.size) == (pillow, (48, 32))
    assert result.output_format == output_format and result.quality == "medium"


def test_the_same_seed_draws_the_same_image(served) -> None:
    srv, _, _ = served
    url = f"{srv.base_url}/v1/images/generations"
    body = {"model": DRAWER, "prompt": PROMPT, "size": "32x32", "seed": 7}
    first, again = (httpx.post(url, json=body, timeout=120).json() for _ in range(2))
    other = httpx.post(url, json={**body, "seed": 8}, timeout=120).json()
    assert first["data"][0]["b64_json"] == again["data"][0]["b64_json"]
    assert other["data"][0]["b64_json"] != first["data"][0]["b64_json"]


def test_a_stream_sends_partial_images_then_the_image(served) -> None:
    _, client, _ = served
    stream = client.images.generate(
        model=DRAWER, prompt=PROMPT, size="64x32", stream=True, partial_images=2
    )
    events = list(stream)
    assert [e.type for e in events] == [
        "image_generation.partial_image",
        "image_generation.partial_image",
        "image_generation.completed",
    ]
    assert [getattr(e, "partial_image_index", None) for e in events] == [0, 1, None]
    for event in events:
        assert picture(event.b64_json).size == (64, 32)
        assert (event.size, event.quality, event.output_format) == ("64x32", "medium", "png")
    done = events[-1]
    assert done.type == "image_generation.completed" and done.usage.output_tokens == 4 * 2
    # The picture is the end of the drawing, not any step on the way.
    assert done.b64_json not in {e.b64_json for e in events[:-1]}


def test_without_partial_images_a_stream_is_one_event_an_image(served) -> None:
    _, client, _ = served
    events = list(client.images.generate(model=DRAWER, prompt=PROMPT, size="32x32",
                                         n=2, stream=True))  # fmt: skip
    assert [e.type for e in events] == ["image_generation.completed"] * 2


@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"prompt": ""}, 400, "prompt"),
        ({"response_format": "url"}, 400, "response_format"),
        ({"size": "100x100"}, 400, "size"),  # not divisible by 16
        ({"size": "16x64"}, 400, "size"),  # 1:4
        ({"size": "big"}, 400, "size"),
        ({"n": 11}, 400, "n"),
        ({"quality": "ultra"}, 400, "quality"),
        ({"output_format": "gif"}, 400, "output_format"),
        ({"output_compression": 101}, 400, "output_compression"),
        ({"background": "transparent"}, 400, "background"),
        ({"partial_images": 4, "stream": True}, 400, "partial_images"),
        ({"model": CHAT}, 400, "model"),
        ({"model": "no-such-model"}, 404, "model"),
    ],
)
def test_refusals_in_openais_shape(served, fields: dict[str, Any], status: int, param: str) -> None:
    srv, _, _ = served
    body = {"model": DRAWER, "prompt": PROMPT, "size": "32x32", **fields}
    answer = httpx.post(f"{srv.base_url}/v1/images/generations", json=body, timeout=60)
    error = answer.json()["error"]
    assert answer.status_code == status and error["param"] == param, error
    assert error["type"] == "invalid_request_error" and error["message"]
    if param == "response_format":
        assert "b64_json" in error["message"]


def test_the_sdk_reads_a_refusal_as_its_error(served) -> None:
    _, client, _ = served
    with pytest.raises(openai.BadRequestError) as refused:
        client.images.generate(model=DRAWER, prompt=PROMPT, response_format="url")
    assert refused.value.code is None and refused.value.param == "response_format"


def test_an_image_model_is_listed_as_one_and_is_not_a_chat_model(served) -> None:
    _, client, _ = served
    assert getattr(client.models.retrieve(DRAWER), "kind") == "image"  # noqa: B009
    with pytest.raises(openai.BadRequestError, match="image generation model"):
        client.responses.create(model=DRAWER, input="Hola")


def test_the_only_image_model_is_the_default(served) -> None:
    srv, _, _ = served
    body = {"prompt": PROMPT, "size": "32x32"}
    answer = httpx.post(f"{srv.base_url}/v1/images/generations", json=body, timeout=120)
    assert answer.status_code == 200 and len(answer.json()["data"]) == 1


def test_a_client_that_goes_away_cancels_the_drawing(served) -> None:
    srv, _, db = served
    body = {"model": DRAWER, "prompt": PROMPT, "size": "32x32", "quality": "max", "n": 10,
            "stream": True, "partial_images": 1}  # fmt: skip
    url = f"{srv.base_url}/v1/images/generations"
    with httpx.stream("POST", url, json=body, timeout=120) as answer:
        gid = answer.headers["x-omni-image-id"]
        for line in answer.iter_lines():
            if line.startswith("data: "):
                break  # the first partial image: then the client goes
    for _ in range(600):  # its ending is committed once the server sees it gone
        types = [t for t, _ in stream_events(db, gid)]
        if types[-1] in ("images.completed", "images.failed"):
            break
        time.sleep(0.05)
    events = stream_events(db, gid)
    assert events[-1][0] == "images.failed"
    assert events[-1][1]["error"]["code"] == "cancelled"
    assert sum(1 for t, _ in events if t == "images.image") < 10
    # The model is free again: the next request is drawn.
    after = httpx.post(url, json={"model": DRAWER, "prompt": PROMPT, "size": "32x32"},
                       timeout=120)  # fmt: skip
    assert after.status_code == 200


def test_the_log_and_the_inspector_see_them(served) -> None:
    _, client, db = served
    answer = client.images.with_raw_response.generate(
        model=DRAWER, prompt=PROMPT, size="48x48", output_format="webp", extra_body={"seed": 3}
    )
    gid = answer.headers["x-omni-image-id"]
    data = answer.parse().data
    assert gid.startswith("img-") and data is not None and data[0].b64_json is not None
    size = len(base64.b64decode(data[0].b64_json))
    assert [t for t, _ in stream_events(db, gid)] == [
        "omni.request.accepted", "images.in_progress", "images.image", "images.completed",
    ]  # fmt: skip
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT model, status, size, quality, steps, seed, n, output_format, prompt_chars,"
            " images, bytes, output_tokens FROM images WHERE id = ?",
            (gid,),
        ).fetchone()
    assert row == (DRAWER, "completed", "48x48", "medium", 4, 3, 1, "webp", len(PROMPT), 1,
                   size, 9)  # fmt: skip
    engine = open_log(str(db))
    try:
        with engine.connect() as conn:
            ins = Inspector(conn)
            listed = {s.id: s for s in ins.recent(kind="image", limit=50)}
            assert listed[gid].status == "completed" and listed[gid].preview == PROMPT
            detail = ins.detail(gid)
            assert detail is not None and detail.request["input"][0]["text"] == PROMPT
            assert detail.request["sampling"]["seed"] == 3
            assert detail.output_text == f"1 image 48x48 webp, {size} bytes"
    finally:
        engine.dispose()
    listed_by_cli = omni("ls", "--db", str(db), "--kind", "image")
    shown = omni("show", gid, "--db", str(db))
    assert listed_by_cli.returncode == 0 and gid in listed_by_cli.stdout
    assert shown.returncode == 0 and "1 image 48x48 webp" in shown.stdout
    assert PROMPT in shown.stdout


def test_on_postgresql_an_image_generation_is_in_its_log(
    tiny_model_dir: Path, tiny_flux_dir: Path, tmp_path: Path, pg_url: str
) -> None:
    from tests.postgres import rows

    with serving((tiny_model_dir, tiny_flux_dir), tmp_path, pg_url, chat_loaded=False) as srv:
        with openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0) as client:
            answer = client.images.with_raw_response.generate(
                model=DRAWER, prompt=PROMPT, size="32x32", n=2, extra_body={"seed": 5}
            )
    gid = answer.headers["x-omni-image-id"]
    query = "SELECT status, size, seed, n, images, output_tokens FROM images WHERE id = %s"
    (row,) = rows(pg_url, query, gid)
    assert row == ("completed", "32x32", 5, 2, 2, 8)
