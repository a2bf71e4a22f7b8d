"""Image inputs, end to end through Hypercorn and the OpenAI SDK, on a tiny random-weight
LLaVA run by mlx-vlm beside a tiny text-only llama: input_image parts on Responses (plain,
streamed, kept in input_items as sent), image_url parts on chat, an image fetched from an
http URL (of a host the server allows: by default an image URL may not name the server's own
network), and the 400s and the 501 a client reads when an image cannot be taken. The text
is noise: the image shows in the prompt's token count (each image is IMAGE_TOKENS tokens)."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import logging
import socketserver
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import BadRequestError, InternalServerError, OpenAI

from omni.api.app import Settings
from omni.image_hosts import ImageHosts
from omni.runtime.loading.catalogue import scan
from omni.runtime.loading.loader import Loader
from omni.service.models import Models
from omni.testing.llama import build_tiny_llama
from omni.testing.vlm import IMAGE_SIZE, PATCH_SIZE, build_tiny_llava
from tests.api._helpers import n_deltas, wait_for
from tests.server import ServerThread, free_port
from tests.test_cli import kill_mid_stream, serving

VLM, LLM = "tiny-llava", "tiny-llama"
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # CLIP's patches (its class token dropped)
QUESTION = "What is this?"
# The image servers here listen on 127.0.0.1, which image URLs may name by this name only.
IMAGE_HOSTS = ImageHosts.parse(["localhost"])


def png(color: tuple[int, int, int] = (200, 10, 10)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(out, format="PNG")
    return out.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


PNG_URL = data_url(png())


def asking(image_url: str | None) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "input_text", "text": QUESTION}]
    if image_url is not None:
        content.append({"type": "input_image", "image_url": image_url, "detail": "auto"})
    return [{"role": "user", "content": content}]


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shelf")
    build_tiny_llava(root / VLM)
    build_tiny_llama(root / LLM)
    return root


def serve(
    shelf: Path,
    tmp: Path,
    fetch_images: bool = True,
    image_hosts: ImageHosts | None = IMAGE_HOSTS,
    **more: Any,
) -> ServerThread:
    home = tmp / "home"
    models = Models(scan(home, [shelf]), Loader(home), default=VLM, max_loaded=2)
    settings = Settings(
        db_path=str(tmp / "omni.db"), fetch_images=fetch_images, image_hosts=image_hosts,
        **more,
    )  # fmt: skip
    return ServerThread(settings, models).start()


@pytest.fixture(scope="module")
def server(shelf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    srv = serve(shelf, tmp_path_factory.mktemp("vision"))
    yield srv
    srv.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[OpenAI]:
    with OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0,
                _strict_response_validation=True) as c:  # fmt: skip
        yield c


@pytest.fixture(scope="module")
def text_only_tokens(server: ServerThread) -> int:
    """The prompt's tokens without the image."""
    with OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0) as c:
        plain = c.responses.create(model=VLM, input=asking(None), max_output_tokens=2)  # type: ignore[arg-type]
    assert plain.usage is not None
    return plain.usage.input_tokens


def test_a_response_sees_the_image_and_input_items_keep_it(
    client: OpenAI, server: ServerThread, text_only_tokens: int
) -> None:
    response = client.responses.create(
        model=VLM,
        input=asking(PNG_URL),
        max_output_tokens=6,
        temperature=0,  # type: ignore[arg-type]
    )
    assert response.status in ("completed", "incomplete") and response.model == VLM
    assert response.usage is not None
    assert response.usage.input_tokens == text_only_tokens + IMAGE_TOKENS
    assert 1 <= response.usage.output_tokens <= 6
    items = client.responses.input_items.list(response.id).data
    assert len(items) == 1 and items[0].type == "message"
    text, image = items[0].content  # type: ignore[union-attr]
    assert text.type == "input_text" and text.text == QUESTION
    assert image.type == "input_image" and image.image_url == PNG_URL
    assert image.detail == "auto"
    assert getattr(client.models.retrieve(VLM), "vision") is True  # noqa: B009
    assert getattr(client.models.retrieve(LLM), "vision") is False  # noqa: B009
    shown = httpx.get(f"{server.base_url}/inspect/api/{response.id}", timeout=30).json()
    assert shown["request"]["input"][0]["text"] == f"{QUESTION} [image]"  # not its bytes


def test_another_image_gives_another_answer(client: OpenAI) -> None:
    """The pixels reach the vision tower: greedy text on a red and on a blue picture differ."""

    def answer(image: bytes) -> str:
        response = client.responses.create(
            model=VLM,
            input=asking(data_url(image)),
            max_output_tokens=8,
            temperature=0,  # type: ignore[arg-type]
        )
        return response.output_text

    assert answer(png((255, 0, 0))) != answer(png((0, 0, 255)))


def test_a_conversation_keeps_its_image_and_a_text_model_refuses_its_chain(
    client: OpenAI, text_only_tokens: int
) -> None:
    """The image of the first turn is in the second turn's prompt (read again from the log);
    a text-only model asked to carry the conversation on is a 400 naming the chain."""
    first = client.responses.create(model=VLM, input=asking(PNG_URL), max_output_tokens=3)  # type: ignore[arg-type]
    second = client.responses.create(
        model=VLM, previous_response_id=first.id, input="And now?", max_output_tokens=3
    )
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert first.usage.input_tokens == text_only_tokens + IMAGE_TOKENS
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(model=LLM, previous_response_id=first.id, input="And now?")
    assert refused.value.param == "previous_response_id"


def test_the_features_say_vision_runs_here(server: ServerThread) -> None:
    facts = httpx.get(f"{server.base_url}/v1/features", timeout=30).json()
    listed = facts["data"] if isinstance(facts, dict) else facts
    vision = next(f for f in listed if f["name"] == "vision")
    assert vision["available"] is True and vision["extra"] == "vision"


def test_a_streamed_response_with_an_image(client: OpenAI, text_only_tokens: int) -> None:
    stream = client.responses.create(
        model=VLM,
        input=asking(PNG_URL),
        max_output_tokens=5,
        stream=True,  # type: ignore[arg-type]
    )
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]  # fmt: skip
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", kinds[-1]]  # fmt: skip
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.input_tokens == text_only_tokens + IMAGE_TOKENS
    assert "".join(d.delta for d in deltas) == final.output_text  # type: ignore[union-attr]


def test_a_running_and_a_waiting_vision_response_are_cancelled(
    client: OpenAI, server: ServerThread
) -> None:
    """One job at a time: the second waits in the engine process, and is cancelled there
    before it starts; the first stops at its next token and keeps its output."""
    long = {"model": VLM, "input": asking(PNG_URL), "max_output_tokens": 2000, "background": True}
    running = client.responses.create(**long)  # type: ignore[call-overload]
    waiting = client.responses.create(**long)  # type: ignore[call-overload]
    assert wait_for(lambda: n_deltas(server, running.id) >= 5, timeout=60)
    never = client.responses.cancel(waiting.id)
    stopped = client.responses.cancel(running.id)
    assert never.status == stopped.status == "cancelled"
    assert never.usage is not None and never.usage.output_tokens == 0
    assert stopped.usage is not None and 5 <= stopped.usage.output_tokens < 2000
    assert stopped.output_text != ""


def test_chat_takes_image_url_parts_as_objects_and_as_strings(
    client: OpenAI, server: ServerThread
) -> None:
    def chat(part: Any) -> dict[str, Any]:
        content = [{"type": "text", "text": QUESTION}, part]
        body = {"model": VLM, "max_tokens": 3, "messages": [{"role": "user", "content": content}]}
        res = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)
        assert res.status_code == 200, res.text
        return res.json()  # type: ignore[no-any-return]

    plain = client.chat.completions.create(
        model=VLM, max_tokens=3, messages=[{"role": "user", "content": QUESTION}]
    )
    sdk = client.chat.completions.create(
        model=VLM,
        max_tokens=3,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": QUESTION},
                    {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}},
                ],
            }
        ],  # fmt: skip
    )
    assert plain.usage is not None and sdk.usage is not None
    assert sdk.usage.prompt_tokens == plain.usage.prompt_tokens + IMAGE_TOKENS
    assert sdk.choices[0].message.role == "assistant"
    as_string = chat({"type": "image_url", "image_url": PNG_URL})
    assert as_string["usage"]["prompt_tokens"] == sdk.usage.prompt_tokens
    chunks = list(
        client.chat.completions.create(
            model=VLM,
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": PNG_URL}},
                        {"type": "text", "text": QUESTION},
                    ],
                }
            ],  # fmt: skip
        )
    )
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens == sdk.usage.prompt_tokens


class _Images(BaseHTTPRequestHandler):
    """/cat.png; /page.html, not an image; /to?URL, a redirect to URL; anything else, 404."""

    asked: list[str] = []  # every path asked for, by any test

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Images.asked.append(self.path)
        if self.path.startswith("/to?"):
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/to?"))
            self.end_headers()
            return
        body = {"/cat.png": png((10, 200, 10)), "/page.html": b"<html>hello</html>"}
        self.send_response(200 if self.path in body else 404)
        self.send_header("Content-Type", "text/html" if self.path == "/page.html" else "image/png")
        self.end_headers()
        self.wfile.write(body.get(self.path, b""))

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def image_host() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://localhost:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _Silent(socketserver.BaseRequestHandler):
    """Takes a connection and answers nothing until `over` is set."""

    over = threading.Event()

    def handle(self) -> None:
        _Silent.over.wait()


@pytest.fixture
def silent_service() -> Iterator[int]:
    """The port of a service on 127.0.0.1 that never answers."""
    _Silent.over.clear()
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Silent) as tcp:
        thread = threading.Thread(target=tcp.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        yield tcp.server_address[1]
        _Silent.over.set()
        tcp.shutdown()


class _Banner(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")


@pytest.fixture
def other_service() -> Iterator[int]:
    """The port of a service on 127.0.0.1 that does not speak HTTP."""
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Banner) as tcp:
        thread = threading.Thread(target=tcp.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        yield tcp.server_address[1]
        tcp.shutdown()


def refused(base_url: str, image_url: str) -> bytes:
    """The 400 body of a Responses request with the image at `image_url`."""
    body = {"model": VLM, "input": asking(image_url), "max_output_tokens": 2}
    res = httpx.post(f"{base_url}/v1/responses", json=body, timeout=120)
    assert res.status_code == 400, res.text
    return res.content


def assert_one_failure(bodies: list[bytes], port: str) -> None:
    """Every body is the same error, which names the part and nothing of the target."""
    assert len(set(bodies)) == 1, bodies
    error = json.loads(bodies[0])["error"]
    assert error["code"] == "failed_to_download_image" and error["param"] == "input[0].content[1]"
    assert "could not be fetched" in error["message"] and port not in error["message"]


def test_an_image_fetched_from_an_http_url(
    client: OpenAI, image_host: str, text_only_tokens: int
) -> None:
    url = f"{image_host}/cat.png"
    response = client.responses.create(model=VLM, input=asking(url), max_output_tokens=2)  # type: ignore[arg-type]
    assert response.usage is not None
    assert response.usage.input_tokens == text_only_tokens + IMAGE_TOKENS
    items = client.responses.input_items.list(response.id).data
    assert items[0].content[1].image_url == url  # type: ignore[union-attr]
    with pytest.raises(BadRequestError) as gone:
        client.responses.create(model=VLM, input=asking(f"{image_host}/nope.png"))  # type: ignore[arg-type]
    assert gone.value.code == "failed_to_download_image"
    assert gone.value.param == "input[0].content[1]"


def test_a_default_server_refuses_image_urls_of_its_own_network(
    shelf: Path, tmp_path: Path, image_host: str
) -> None:
    """However loopback is spelled, and link-local addresses (a cloud's metadata service):
    one 400, and nothing is fetched; chat's image_url parts alike."""
    srv = serve(shelf, tmp_path, image_hosts=None)
    port = image_host.rsplit(":", 1)[1]
    hosts = ["127.0.0.1", "localhost", "[::1]", "2130706433", "0x7f.1", "127.1",
             "[::ffff:127.0.0.1]", "169.254.169.254"]  # fmt: skip
    asked = len(_Images.asked)
    try:
        bodies = [refused(srv.base_url, f"http://{host}:{port}/cat.png") for host in hosts]
        part = {"type": "image_url", "image_url": {"url": f"{image_host}/cat.png"}}
        chat = {"model": VLM, "messages": [{"role": "user", "content": [part]}]}
        res = httpx.post(f"{srv.base_url}/v1/chat/completions", json=chat, timeout=120)
    finally:
        srv.stop()
    assert_one_failure(bodies, port)
    assert res.status_code == 400 and res.json()["error"]["param"] == "messages[0].content[0]"
    assert res.json()["error"]["message"] == json.loads(bodies[0])["error"]["message"]
    assert len(_Images.asked) == asked  # nothing was fetched


def test_every_failed_fetch_reads_the_same(
    server: ServerThread, image_host: str, other_service: int
) -> None:
    """A closed port, a service that is not HTTP, an HTTP 404, an answer that is no image,
    a redirect to a host not allowed, a private address: byte-identical 400s (else the
    error would scan ports for a client)."""
    port = image_host.rsplit(":", 1)[1]
    urls = [
        f"http://localhost:{free_port()}/cat.png",
        f"http://localhost:{other_service}/cat.png",
        f"{image_host}/nope.png",
        f"{image_host}/page.html",
        f"{image_host}/to?http://127.0.0.1:{port}/cat.png",
        "http://169.254.169.254/latest/meta-data/",
    ]
    assert_one_failure([refused(server.base_url, url) for url in urls], port)


def test_an_image_fetch_ends_at_the_servers_deadline(
    shelf: Path,
    tmp_path: Path,
    image_host: str,
    silent_service: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """--image-fetch-timeout reaches the fetcher: a host that never answers is the one 400
    once that time is up, well before a read's own timeout; the log says which it was."""
    srv = serve(shelf, tmp_path, image_fetch_timeout_s=0.5)
    try:
        with caplog.at_level(logging.INFO, logger="omni.service.vision_inputs"):
            bodies = [
                refused(srv.base_url, f"http://localhost:{silent_service}/cat.png"),
                refused(srv.base_url, f"{image_host}/nope.png"),
            ]
    finally:
        srv.stop()
    assert_one_failure(bodies, str(silent_service))
    reasons = [r.getMessage() for r in caplog.records if r.name == "omni.service.vision_inputs"]
    assert reasons[0].endswith("not fetched within 0.5 s") and len(reasons) == 2


def test_a_redirect_to_a_host_not_allowed_is_refused(
    client: OpenAI, image_host: str, text_only_tokens: int
) -> None:
    """The allowed host's redirects are followed, each hop checked: to the same server under
    a name that is not allowed, the image is not asked for."""
    followed = client.responses.create(
        model=VLM,
        input=asking(f"{image_host}/to?/cat.png"),  # type: ignore[arg-type]
        max_output_tokens=2,
    )
    assert followed.usage is not None
    assert followed.usage.input_tokens == text_only_tokens + IMAGE_TOKENS
    port = image_host.rsplit(":", 1)[1]
    away = f"{image_host}/to?http://127.0.0.1:{port}/cat.png"
    asked = len(_Images.asked)
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(model=VLM, input=asking(away))  # type: ignore[arg-type]
    assert refused.value.code == "failed_to_download_image"
    assert _Images.asked[asked:] == [f"/to?http://127.0.0.1:{port}/cat.png"]


def test_a_server_without_image_urls_takes_data_urls_alone(
    shelf: Path, tmp_path: Path, image_host: str
) -> None:
    """--no-image-urls: clients cannot make the server reach another host."""
    srv = serve(shelf, tmp_path, fetch_images=False)
    asked = len(_Images.asked)
    try:
        with OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0) as sdk:
            with pytest.raises(BadRequestError) as refused:
                sdk.responses.create(model=VLM, input=asking(f"{image_host}/cat.png"))  # type: ignore[arg-type]
            assert refused.value.code == "invalid_image_url"
            assert refused.value.param == "input[0].content[1]"
            assert "--no-image-urls" in refused.value.message
            answered = sdk.responses.create(model=VLM, input=asking(PNG_URL), max_output_tokens=2)  # type: ignore[arg-type]
            assert answered.status in ("completed", "incomplete")
    finally:
        srv.stop()
    assert len(_Images.asked) == asked  # nothing was fetched


def test_a_text_only_model_refuses_images(client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(model=LLM, input=asking(PNG_URL))  # type: ignore[arg-type]
    assert "does not accept images" in refused.value.message
    assert refused.value.param == "input[0].content[1]"
    with pytest.raises(BadRequestError) as chat:
        client.chat.completions.create(
            model=LLM,
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_URL}}]}
            ],  # fmt: skip
        )
    assert "does not accept images" in chat.value.message
    assert chat.value.param == "messages[0].content[0]"


@pytest.mark.parametrize(
    ("image_url", "code"),
    [
        ("data:image/png;base64,not base64!", "invalid_base64_image"),
        ("data:text/plain;base64,aGk=", "unsupported_image_media_type"),
        ("data:image/png,raw", "invalid_base64_image"),
        (data_url(b"GIF89a but not really"), "invalid_image_format"),
        ("data:image/png;base64,", "empty_image_file"),
        ("ftp://example.com/cat.png", "invalid_image_url"),
    ],
)
def test_a_bad_image_is_a_400_naming_the_part(client: OpenAI, image_url: str, code: str) -> None:
    with pytest.raises(BadRequestError) as bad:
        client.responses.create(model=VLM, input=asking(image_url))  # type: ignore[arg-type]
    assert bad.value.code == code and bad.value.param == "input[0].content[1]"


def test_an_image_by_file_id_or_outside_a_user_message_is_a_400(client: OpenAI) -> None:
    by_file = [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1",
                                             "detail": "auto"}]}]  # fmt: skip
    with pytest.raises(BadRequestError) as no_files:
        client.responses.create(model=VLM, input=by_file)  # type: ignore[arg-type]
    assert no_files.value.param == "input[0].content[0].file_id"
    system = [{"role": "system", "content": [{"type": "input_image", "image_url": PNG_URL,
                                              "detail": "auto"}]}]  # fmt: skip
    with pytest.raises(BadRequestError) as not_user:
        client.responses.create(model=VLM, input=system)  # type: ignore[arg-type]
    assert not_user.value.param == "input[0].content[0]"


def test_a_vision_model_without_the_extra_is_a_501_with_the_install_command(
    shelf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlx_vlm" else found(name, *a)
    )
    srv = serve(shelf, tmp_path)
    try:
        with OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0) as c:
            with pytest.raises(InternalServerError) as missing:
                c.responses.create(model=VLM, input=asking(PNG_URL))  # type: ignore[arg-type]
    finally:
        srv.stop()
    assert missing.value.status_code == 501
    assert "pip install 'omni-mlx[vision]'" in missing.value.message


def test_omni_serve_continues_a_background_vision_response_after_kill_9(
    shelf: Path, tmp_path: Path
) -> None:
    """`omni serve --model` on the VLM; killed mid-generation, the restarted server reads the
    recorded image again and carries on token-exactly (greedy: as an uninterrupted run)."""
    db = tmp_path / "omni.db"
    body = {"model": VLM, "input": asking(PNG_URL), "max_output_tokens": 200, "temperature": 0}
    with serving(shelf / VLM, db) as (base, proc):
        created = httpx.post(f"{base}/v1/responses", json={**body, "background": True}, timeout=120)
        rid = created.json()["id"]
        kill_mid_stream(base, rid, proc, 20)
    with serving(shelf / VLM, db) as (base, _):
        with OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0) as client:
            deadline = time.monotonic() + 300
            while (final := client.responses.retrieve(rid)).status in ("queued", "in_progress"):
                assert time.monotonic() < deadline, f"{rid} did not end"
                time.sleep(0.2)
            reference = client.responses.create(**body)  # type: ignore[call-overload]
    assert final.status == reference.status and final.output_text == reference.output_text
    assert final.usage is not None and reference.usage is not None
    assert final.usage.input_tokens == reference.usage.input_tokens
