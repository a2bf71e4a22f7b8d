"""The official Anthropic Python SDK (`anthropic`) against a real server with API keys, on the
tiny real llama (and, for images, a tiny LLaVA): create, the stream helper's text and final
message equal to the create's answer, a forced tool call and its result, images (refused by a
text model, seen by a vision model, by base64 and by URL from a local host), count_tokens,
the SDK's error classes over Anthropic's error bodies; and one model answering a Responses, a
chat and a Messages request in one batch. Raw HTTP: test_messages.py."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import pytest
from anthropic.types import MessageParam, TextBlock, ThinkingBlock, ToolParam, ToolUseBlock
from openai import OpenAI

from omni.api.app import Settings
from omni.api.gate import Access
from omni.api.keys import KeyRing, api_key
from omni.image_hosts import ImageHosts
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.catalogue import scan
from omni.runtime.loading.loader import Loader
from omni.runtime.loading.source import ModelSource
from omni.service.models import Models
from omni.testing.llama import build_tiny_llama
from omni.testing.vlm import IMAGE_SIZE, PATCH_SIZE, build_tiny_llava
from tests.api._helpers import MODEL, holding, wait_for
from tests.server import ServerThread

KEY = "sk-claude-" + "c" * 24
GREEDY: dict[str, Any] = {"temperature": 0}  # the SDK takes sampling only as extra_body
HI: list[MessageParam] = [{"role": "user", "content": "Say hello."}]
WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
VLM = "tiny-llava"
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2


@pytest.fixture(scope="module")
def keyed(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    db = tmp_path_factory.mktemp("messages-sdk") / "omni.db"
    access = Access(keys=KeyRing([api_key(KEY, "claude")]))
    srv = ServerThread(Settings(db_path=str(db), keepalive=1.0, access=access), tiny_engine)
    yield srv.start()
    srv.stop()


def sdk(srv: ServerThread, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=srv.base_url, api_key=key, max_retries=0, _strict_response_validation=True
    )


@pytest.fixture(scope="module")
def claude(keyed: ServerThread) -> Iterator[anthropic.Anthropic]:
    with sdk(keyed) as c:
        yield c


def text_of(message: anthropic.types.Message) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextBlock))


def prompt_tokens(message: anthropic.types.Message) -> int:
    """The whole prompt: Anthropic's input_tokens leaves out what the cache read."""
    usage = message.usage
    return usage.input_tokens + (usage.cache_read_input_tokens or 0)


# --- create, stream ------------------------------------------------------------------------


def test_create(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(model=MODEL, max_tokens=6, messages=HI, extra_body=GREEDY)
    assert message.id.startswith("msg_") and message.type == "message"
    assert message.role == "assistant" and message.model == MODEL
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in message.content] == ["text"]
    assert 1 <= message.usage.output_tokens <= 6 and message.usage.input_tokens > 0


def test_the_stream_helper_assembles_the_create_answer(claude: anthropic.Anthropic) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "Tell me something."}],
        "system": "Be brief.",
        "extra_body": GREEDY,
    }
    created = claude.messages.create(**body)
    with claude.messages.stream(**body) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.id != created.id
    assert streamed == text_of(created) == text_of(final)
    assert [(b.type, getattr(b, "text", None)) for b in final.content] == [
        (b.type, getattr(b, "text", None)) for b in created.content
    ]
    assert final.stop_reason == created.stop_reason
    assert prompt_tokens(final) == prompt_tokens(created)
    assert final.usage.output_tokens == created.usage.output_tokens


# --- tools ---------------------------------------------------------------------------------


def test_a_forced_tool_call_and_its_result(claude: anthropic.Anthropic) -> None:
    """tool_use (forced: the model is random) → tool_result → an answer."""
    asked: list[MessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = claude.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=asked,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        extra_body=GREEDY,
    )
    assert called.stop_reason == "tool_use", called
    (use,) = [b for b in called.content if isinstance(b, ToolUseBlock)]
    assert use.id.startswith("toolu_") and use.name == "get_weather"
    assert use.input in ({"city": "Paris"}, {"city": "Rome"})
    with claude.messages.stream(
        model=MODEL,
        max_tokens=64,
        messages=asked,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        extra_body=GREEDY,
    ) as stream:
        streamed = stream.get_final_message()
    (again,) = [b for b in streamed.content if isinstance(b, ToolUseBlock)]
    assert (again.name, again.input) == (use.name, use.input)  # the SDK's partial JSON, whole
    answer = claude.messages.create(
        model=MODEL,
        max_tokens=4,
        messages=[
            *asked,
            {"role": "assistant", "content": called.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "18C, sunny"}
                ],
            },
        ],
        tools=[WEATHER],
        extra_body=GREEDY,
    )
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert prompt_tokens(answer) > prompt_tokens(called)  # the call and its result too


# --- count_tokens, errors --------------------------------------------------------------------


def test_count_tokens_counts_the_system_and_the_tools(claude: anthropic.Anthropic) -> None:
    def count(**more: Any) -> int:
        return claude.messages.count_tokens(model=MODEL, messages=HI, **more).input_tokens

    bare = count()
    assert bare > 0
    assert count(system="You are a terse assistant.") > bare
    assert count(tools=[WEATHER]) > bare
    message = claude.messages.create(model=MODEL, max_tokens=1, messages=HI, extra_body=GREEDY)
    assert prompt_tokens(message) == bare


def _refused(call: Callable[[], Any], error: type[anthropic.APIStatusError], type_: str) -> str:
    with pytest.raises(error) as raised:
        call()
    body = raised.value.body
    assert isinstance(body, dict) and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == type_, body
    return str(body["error"]["message"])


def test_errors_are_the_sdks_classes(claude: anthropic.Anthropic, keyed: ServerThread) -> None:
    _refused(
        lambda: claude.messages.create(model="nope", max_tokens=2, messages=HI),
        anthropic.NotFoundError,
        "not_found_error",
    )
    _refused(
        lambda: claude.messages.count_tokens(model="nope", messages=HI),
        anthropic.NotFoundError,
        "not_found_error",
    )
    message = _refused(
        lambda: claude.messages.create(model=MODEL, max_tokens=0, messages=HI),
        anthropic.BadRequestError,
        "invalid_request_error",
    )
    assert "max_tokens" in message
    _refused(
        lambda: claude.messages.create(
            model=MODEL,
            max_tokens=2,
            messages=HI,
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
        ),
        anthropic.BadRequestError,
        "invalid_request_error",
    )
    with sdk(keyed, "sk-wrong") as wrong:
        _refused(
            lambda: wrong.messages.create(model=MODEL, max_tokens=2, messages=HI),
            anthropic.AuthenticationError,
            "authentication_error",
        )

        def streamed() -> None:
            with wrong.messages.stream(model=MODEL, max_tokens=2, messages=HI) as stream:
                stream.get_final_message()

        _refused(streamed, anthropic.AuthenticationError, "authentication_error")


# --- images --------------------------------------------------------------------------------


def png(color: tuple[int, int, int]) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(out, format="PNG")
    return out.getvalue()


def looking(source: dict[str, Any]) -> list[MessageParam]:
    image: Any = {"type": "image", "source": source}
    return [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]


BASE64 = {
    "type": "base64",
    "media_type": "image/png",
    "data": base64.b64encode(png((9, 9, 9))).decode(),
}


def test_a_text_model_refuses_an_image(claude: anthropic.Anthropic) -> None:
    _refused(
        lambda: claude.messages.create(model=MODEL, max_tokens=2, messages=looking(BASE64)),
        anthropic.BadRequestError,
        "invalid_request_error",
    )


class _Picture(BaseHTTPRequestHandler):
    """/red.png, a PNG; anything else, 404."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = png((250, 5, 5)) if self.path == "/red.png" else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "image/png")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def picture_host() -> Iterator[str]:
    """An image host on 127.0.0.1 (named `localhost`, which the vision server allows)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Picture)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://localhost:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Iterator[anthropic.Anthropic]:
    """A server of the tiny LLaVA (no keys), and the SDK to it."""
    root = tmp_path_factory.mktemp("vision-shelf")
    build_tiny_llava(root / VLM)
    home = root / "home"
    models = Models(scan(home, [root]), Loader(home), default=VLM, max_loaded=1)
    settings = Settings(db_path=str(root / "omni.db"), image_hosts=ImageHosts.parse(["localhost"]))
    srv = ServerThread(settings, models).start()
    try:
        with sdk(srv, "x") as c:
            yield c
    finally:
        srv.stop()


def test_a_vision_model_sees_an_image_by_base64_and_by_url(
    vision: anthropic.Anthropic, picture_host: str
) -> None:
    def ask(messages: list[MessageParam]) -> anthropic.types.Message:
        return vision.messages.create(model=VLM, max_tokens=4, messages=messages, extra_body=GREEDY)

    plain = ask([{"role": "user", "content": [{"type": "text", "text": "What is this?"}]}])
    inline = ask(looking(BASE64))
    fetched = ask(looking({"type": "url", "url": f"{picture_host}/red.png"}))
    for seen in (inline, fetched):
        assert prompt_tokens(seen) == prompt_tokens(plain) + IMAGE_TOKENS
        assert [b.type for b in seen.content] == ["text"]
    counted = vision.messages.count_tokens(model=VLM, messages=looking(BASE64))
    assert counted.input_tokens == prompt_tokens(inline)
    _refused(
        lambda: ask(looking({"type": "url", "url": f"{picture_host}/missing.png"})),
        anthropic.BadRequestError,
        "invalid_request_error",
    )


THINKER = "tiny-thinker"
# The tiny thinker's end, <think> and </think>: banned, so only the budget closes the block.
NO_ENDS = {"2": -100, "3": -100, "4": -100}


@pytest.fixture(scope="module")
def thinking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A server of a tiny reasoning llama (its template opens a think block)."""
    root = tmp_path_factory.mktemp("thinker")
    engine = MLXEngine(ModelSource(str(build_tiny_llama(root / THINKER, thinking=True)), THINKER))
    engine.start()
    try:
        srv = ServerThread(Settings(db_path=str(root / "omni.db")), engine).start()
        try:
            yield srv
        finally:
            srv.stop()
    finally:
        engine.close()


def test_thinking_is_a_signed_block_the_sdk_sends_back(thinking: ServerThread) -> None:
    """thinking enabled with a budget: a thinking block (its text, no markers) whose
    signature the server's sealer opens to that text, then the answer; the stream helper
    assembles the same; and the block goes back in the next turn as Claude Code sends it."""
    body: dict[str, Any] = {
        "model": THINKER,
        "max_tokens": 12,
        "messages": [{"role": "user", "content": "Think, then answer."}],
        "thinking": {"type": "enabled", "budget_tokens": 5},
        "extra_body": {"temperature": 0, "logit_bias": NO_ENDS},
    }
    sealer = thinking.state.responses.sealer
    with sdk(thinking, "x") as client:
        message = client.messages.create(**body)
        with client.messages.stream(**body) as stream:
            final = stream.get_final_message()
        thought, said = message.content
        assert isinstance(thought, ThinkingBlock) and isinstance(said, TextBlock)
        assert thought.thinking and said.text
        assert "<think>" not in thought.thinking + said.text
        assert "</think>" not in thought.thinking + said.text
        opened = sealer.open(thought.signature, "signature")
        assert opened == [{"type": "reasoning_text", "text": thought.thinking}]
        streamed, answered = final.content
        assert isinstance(streamed, ThinkingBlock) and isinstance(answered, TextBlock)
        assert (streamed.thinking, answered.text) == (thought.thinking, said.text)
        assert sealer.open(streamed.signature, "signature") == opened
        later = client.messages.create(
            **{
                **body,
                "messages": [
                    *body["messages"],
                    {"role": "assistant", "content": message.content},
                    {"role": "user", "content": "And then?"},
                ],
            }
        )
    assert prompt_tokens(later) > prompt_tokens(message)


# --- three APIs, one batch ---------------------------------------------------------------------


def test_a_response_a_chat_and_a_message_share_a_batch(
    keyed: ServerThread, claude: anthropic.Anthropic
) -> None:
    """Held until all three reach the engine, then handed to it together: they complete, and
    the engine's steps decoded the three at once."""
    engine = keyed.state.engine
    steps: list[int] = []
    counted = engine.on_step

    def on_step(n: int) -> None:
        steps.append(n)
        if counted is not None:
            counted(n)

    with OpenAI(base_url=f"{keyed.base_url}/v1", api_key=KEY, max_retries=0) as openai:
        calls: list[Callable[[], Any]] = [
            lambda: openai.responses.create(
                model=MODEL, input="one", max_output_tokens=8, temperature=0
            ),
            lambda: openai.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "two"}],
                max_tokens=8,
                temperature=0,
            ),
            lambda: claude.messages.create(
                model=MODEL,
                max_tokens=8,
                messages=[{"role": "user", "content": "three"}],
                extra_body=GREEDY,
            ),
        ]
        engine.on_step = on_step
        try:
            with holding(keyed) as held, ThreadPoolExecutor(3) as pool:
                futures = [pool.submit(call) for call in calls]
                assert wait_for(lambda: len(held.jobs) == 3, timeout=30)
                held.release()
                response, chat, message = (f.result(timeout=60) for f in futures)
        finally:
            engine.on_step = counted
    assert response.status in ("completed", "incomplete") and response.output_text
    assert chat.choices[0].finish_reason in ("stop", "length")
    assert message.stop_reason in ("end_turn", "max_tokens") and text_of(message)
    assert max(steps) == 3, steps
