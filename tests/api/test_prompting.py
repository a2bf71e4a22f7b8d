"""Prompt work neither freezes nor bloats the server: rendering runs off the event loop one
request at a time, truncation costs O(log n) renders, and text the context cannot hold is
refused before it is tokenized. The tiny model's real tokenizer and engine, watched."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from omni.runtime.chat.tokenizer import longest_token
from tests.server import running


class WatchedEngine:
    """The tiny engine, counting its renders and encodes, noting the threads they run on and
    how many overlap; a render can be held until the test lets it go."""

    def __init__(self, engine: Any):
        self._engine = engine
        self.model_id = engine.model_id
        self.capabilities = engine.capabilities  # the tiny model's template: its own
        self.queued = self.running = 0
        self.loading, self.load_error, self.memory_bytes, self.path = False, None, None, ""
        self.on_step = None
        self.renders = 0
        self.encodes = 0
        self.threads: set[str] = set()
        self.overlap = self.most_overlap = 0
        self.hold: threading.Event | None = None
        self.holding = threading.Event()
        self._lock = threading.Lock()

    def _enter(self) -> None:
        with self._lock:
            self.threads.add(threading.current_thread().name)
            self.overlap += 1
            self.most_overlap = max(self.most_overlap, self.overlap)

    def _leave(self) -> None:
        with self._lock:
            self.overlap -= 1

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        self._enter()
        try:
            self.renders += 1
            if self.hold is not None:
                self.holding.set()
                self.hold.wait(timeout=60)
            return list(self._engine.render(messages, tools))
        finally:
            self._leave()

    def encode(self, text: str) -> list[int]:
        self._enter()
        try:
            self.encodes += 1
            return list(self._engine.encode(text))
        finally:
            self._leave()

    def submit(self, job: Any) -> None:
        self._engine.submit(job)

    def close(self) -> None:
        pass


@pytest.fixture
def watched(tiny_engine: Any, tmp_path: Path) -> Iterator[tuple[WatchedEngine, Any, Any]]:
    engine = WatchedEngine(tiny_engine)
    with running(engine, tmp_path / "omni.db") as (srv, client):
        yield engine, srv, client


def test_the_longest_token_bounds_every_token(tiny_engine: Any) -> None:
    longest = longest_token(tiny_engine._tokenizer)
    assert longest == tiny_engine.max_token_bytes
    text = "The quick brown fox jumps over the lazy dog. <|im_start|> 12345" * 20
    assert len(tiny_engine.encode(text)) >= len(text.encode()) / longest


def test_truncation_renders_a_logarithmic_number_of_times(watched) -> None:  # type: ignore[no-untyped-def]
    engine, _, client = watched
    items = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: the quick fox"}
        for i in range(2000)
    ]
    r = client.responses.create(
        model=engine.model_id, input=items, truncation="auto", max_output_tokens=2
    )
    assert r.usage is not None and r.usage.input_tokens < engine.capabilities.context_length
    # Dropping one item per render took ~1,900 renders; bisection takes about log2(2000) = 11.
    assert engine.renders <= 16, engine.renders
    # The newest items stayed, as many as fit: one more would not.
    kept = r.usage.input_tokens
    assert kept > engine.capabilities.context_length - 40


def test_truncation_keeps_the_same_suffix_as_dropping_one_at_a_time(watched) -> None:  # type: ignore[no-untyped-def]
    engine, _, client = watched
    items = [{"role": "user", "content": "word " * (7 + 13 * (i % 5))} for i in range(300)]
    r = client.responses.create(
        model=engine.model_id, input=items, truncation="auto", max_output_tokens=2
    )
    expected = None
    for start in range(len(items)):  # the old way, here in the test
        messages = [{"role": m["role"], "content": m["content"]} for m in items[start:]]
        if len(engine._engine.render(messages, [])) < engine.capabilities.context_length:
            expected = len(engine._engine.render(messages, []))
            break
    assert r.usage is not None and r.usage.input_tokens == expected


def test_rendering_runs_off_the_event_loop(watched) -> None:  # type: ignore[no-untyped-def]
    engine, srv, _ = watched
    engine.hold = threading.Event()
    order: list[str] = []
    body = {"model": engine.model_id, "input": "held", "max_output_tokens": 2}
    with ThreadPoolExecutor(1) as pool:
        created = pool.submit(httpx.post, f"{srv.base_url}/v1/responses", json=body, timeout=60)
        try:
            assert engine.holding.wait(timeout=30)
            order.append("render started")
            health = httpx.get(f"{srv.base_url}/health", timeout=30)
            order.append(f"health {health.status_code}")
        finally:
            engine.hold.set()
        assert created.result().status_code == 200
        order.append("created")
    assert order == ["render started", "health 200", "created"]
    assert all(name.startswith("omni-prompt") for name in engine.threads), engine.threads


def test_prompts_are_built_one_request_at_a_time(watched) -> None:  # type: ignore[no-untyped-def]
    engine, srv, _ = watched
    body = {"model": engine.model_id, "max_output_tokens": 2}
    chat = {**body, "max_tokens": 2, "messages": [{"role": "user", "content": "a " * 300}]}
    with ThreadPoolExecutor(6) as pool:
        answers = [
            pool.submit(
                httpx.post, f"{srv.base_url}/v1/responses", json={**body, "input": "a " * 300}
            )
            for _ in range(3)
        ] + [pool.submit(httpx.post, f"{srv.base_url}/v1/chat/completions", json=chat)]
        answers.append(
            pool.submit(
                httpx.post,
                f"{srv.base_url}/v1/completions",
                json={**body, "max_tokens": 2, "prompt": "b " * 300},
            )
        )
        assert [a.result(timeout=120).status_code for a in answers] == [200] * 5
    assert engine.most_overlap == 1
    assert engine.renders == 4 and engine.encodes == 1


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/responses", "input"),
        ("/v1/chat/completions", "messages"),
        ("/v1/completions", "prompt"),
    ],
)
def test_text_the_context_cannot_hold_is_refused_untokenized(
    watched, path: str, field: str
) -> None:  # type: ignore[no-untyped-def]
    engine, srv, _ = watched
    text = "x" * (2 * engine.capabilities.max_token_bytes * engine.capabilities.context_length + 1)
    value: Any = text if field != "messages" else [{"role": "user", "content": text}]
    for extra in ({}, {"truncation": "auto"} if field == "input" else {}):
        r = httpx.post(
            f"{srv.base_url}{path}", json={"model": engine.model_id, field: value, **extra}
        )
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "context_length_exceeded"
        assert error["param"] == field
        assert "at least" in error["message"]
    assert engine.renders == 0 and engine.encodes == 0
