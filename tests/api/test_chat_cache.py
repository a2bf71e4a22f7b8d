"""The replay cache: a deterministic chat request (temperature 0, or a seed) with the same
model and normalized request as a kept one (all but `store: false`) is answered from the log (the
stored chunks, under a new completion id, header `x-omni-cache: hit`, no generation);
identical requests arriving while the first generates follow its stream (single flight).
Errors, cancelled and truncated completions are never cached (nor unstored ones:
tests/api/test_privacy.py); bounds evict; the index survives restarts and is rebuilt from
the log when lost."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from omni.api.app import Settings
from omni.events import driver
from omni.events.sqlite import cache as sqlite_cache
from omni.events.sqlite import store as event_store
from tests.api._helpers import KEEPALIVE, MODEL, capture, read_log, wait_for
from tests.server import ServerThread

DONE = b"data: [DONE]\n\n"
# A hang's bound only: a 2,000-token answer takes ~2.5 s on an idle machine, many times that
# on a loaded one.
HTTP_TIMEOUT = 120.0
USAGE = "chat.completion.usage"


def body_for(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 12,
        "temperature": 0,
        "store": True,  # kept whatever the server's default: only kept answers are replayed
        **extra,
    }


def post(srv: ServerThread, body: dict[str, Any], **headers: str) -> tuple[str, dict[str, Any]]:
    """Non-streaming create: (x-omni-cache header, JSON body)."""
    with httpx.Client(base_url=srv.base_url, timeout=HTTP_TIMEOUT) as h:
        res = h.post("/v1/chat/completions", json=body, headers=headers)
    assert res.status_code == 200, res.text
    return res.headers["x-omni-cache"], res.json()


def payloads(raw: bytes) -> list[str]:
    assert raw.endswith(DONE), raw[-200:]
    out = [b[len(b"data: ") :].decode() for b in raw.replace(KEEPALIVE, b"").split(b"\n\n")[:-1]]
    assert out[-1] == "[DONE]"
    return out[:-1]


def stream(srv: ServerThread, body: dict[str, Any], **headers: str) -> tuple[str, list[str]]:
    """Streaming create: (x-omni-cache header, raw data payloads)."""
    with httpx.Client(base_url=srv.base_url, timeout=HTTP_TIMEOUT) as h:
        res, raw = capture(
            h, "POST", "/v1/chat/completions", json={**body, "stream": True}, headers=headers
        )
    assert res.status_code == 200, raw[:300]
    return res.headers["x-omni-cache"], payloads(raw)


def answer(completion: dict[str, Any]) -> dict[str, Any]:
    """What must be byte-identical between a completion and its replay."""
    choice = completion["choices"][0]
    return {
        "content": choice["message"]["content"],
        "logprobs": choice["logprobs"],
        "finish_reason": choice["finish_reason"],
        "usage": completion["usage"],
    }


def streamed_answer(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    logprobs = [
        e
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"] is not None
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    return {
        "content": "".join(
            c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]
        ),
        "logprobs": {"content": logprobs, "refusal": None} if logprobs else None,
        "finish_reason": next(
            c["choices"][0]["finish_reason"]
            for c in chunks
            if c["choices"] and c["choices"][0]["finish_reason"]
        ),
        "usage": chunks[-1]["usage"],
    }


def generations(srv: ServerThread) -> int:
    return int(srv.state.engine.generations)


def cache_rows(db_path: str) -> list[tuple[str, str, int]]:
    """The chat_cache table, read with sqlite3 directly on the database file."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return list(conn.execute("SELECT key, completion_id, created_at FROM chat_cache"))
    finally:
        conn.close()


def last_type(db_path: str, stream_id: str) -> str | None:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT type FROM events WHERE stream_id = ? ORDER BY seq DESC LIMIT 1", (stream_id,)
        ).fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


def check_index_points_at_finished_streams(db_path: str) -> None:
    for key, cid, _ in cache_rows(db_path):
        assert last_type(db_path, cid) == USAGE, (key, cid, last_type(db_path, cid))


def ended(srv: ServerThread) -> bool:
    """The server's latest completion is no longer running (its recording has ended)."""
    conn = sqlite3.connect(f"file:{db_of(srv)}?mode=ro", uri=True)
    try:
        (request,) = conn.execute(
            "SELECT stream_id FROM events WHERE stream_id LIKE '%/request'"
            " ORDER BY position DESC LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    return srv.state.responses.runs.get(request.removesuffix("/request")) is None


def db_of(srv: ServerThread) -> str:
    return str(srv.state.store.path)


# --- against the module's server --------------------------------------------------------


def test_hit_replays_the_stored_chunks_under_a_new_id(server) -> None:
    body = body_for("cache me", logprobs=True, top_logprobs=2)
    g = generations(server)
    h1, first = post(server, body)
    assert (h1, generations(server)) == ("miss", g + 1)
    h2, second = post(server, body)
    assert (h2, generations(server)) == ("hit", g + 1)  # no generation
    assert second["id"] != first["id"] and second["id"].startswith("chatcmpl-")
    assert answer(second) == answer(first)
    assert second["object"] == "chat.completion"
    # The hit is a stream in the log too: the original's rows, under the new id.
    original = read_log(server, first["id"])
    copy = read_log(server, second["id"])
    assert [r.type for r in copy] == [r.type for r in original]
    assert [r.data for r in copy] == [
        r.data.replace(f'"id":"{first["id"]}"', f'"id":"{second["id"]}"') for r in original
    ]
    assert all(json.loads(r.data).get("id", second["id"]) == second["id"] for r in copy)
    # A third time is still a hit of the same original.
    h3, third = post(server, body)
    assert h3 == "hit" and answer(third) == answer(first)
    assert generations(server) == g + 1


def test_seed_makes_a_request_deterministic(server) -> None:
    body = body_for("seeded", temperature=1.0, seed=99)
    g = generations(server)
    h1, first = post(server, body)
    h2, second = post(server, body)
    assert (h1, h2) == ("miss", "hit")
    assert generations(server) == g + 1
    assert answer(second) == answer(first)
    # Another seed is another request.
    h3, _ = post(server, {**body, "seed": 100})
    assert h3 == "miss"


def test_non_deterministic_requests_never_hit(server) -> None:
    g = generations(server)
    for body in (
        body_for("random", temperature=1.0),
        body_for("random", temperature=1.0),
        {k: v for k, v in body_for("random default temperature").items() if k != "temperature"},
        {k: v for k, v in body_for("random default temperature").items() if k != "temperature"},
    ):
        header, _ = post(server, body)
        assert header == "miss"
    assert generations(server) == g + 4


def test_streamed_then_non_streamed_hits(server) -> None:
    body = body_for("stream first", max_tokens=10)
    g = generations(server)
    h1, raw = stream(server, {**body, "stream_options": {"include_usage": True}})
    chunks = [json.loads(p) for p in raw]
    h2, folded = post(server, body)
    assert (h1, h2) == ("miss", "hit")
    assert generations(server) == g + 1
    assert folded["id"] != chunks[0]["id"]
    assert answer(folded) == streamed_answer(chunks)


def test_non_streamed_then_streamed_hits_and_streams_the_stored_bytes(server) -> None:
    body = body_for("non-stream first", max_tokens=10)
    g = generations(server)
    h1, first = post(server, body)
    h2, raw = stream(server, {**body, "stream_options": {"include_usage": True}})
    assert (h1, h2) == ("miss", "hit")
    assert generations(server) == g + 1
    chunks = [json.loads(p) for p in raw]
    assert streamed_answer(chunks) == answer(first)
    assert raw == [r.data for r in read_log(server, chunks[0]["id"])]
    # Without include_usage the replay holds back the usage chunk.
    h3, raw3 = stream(server, body)
    assert h3 == "hit"
    assert all(json.loads(p)["usage"] is None for p in raw3)
    assert len(raw3) == len(raw) - 1


def test_the_request_is_normalized(server) -> None:
    body = body_for("normalize me", max_tokens=8, stop="\x00")
    h, first = post(server, body)
    assert h == "miss"
    g = generations(server)
    same = [
        {**body, "stop": ["\x00"]},  # a string stop is a list of one
        {**{k: v for k, v in body.items() if k != "max_tokens"}, "max_completion_tokens": 8},
        {**body, "user": "someone", "metadata": {"a": "b"}, "store": False},
        {**body, "temperature": 0.0},
        {**body, "extra_unknown_key": 1},
    ]
    for variant in same:
        header, got = post(server, variant)
        assert header == "hit", variant
        assert answer(got) == answer(first)
    assert generations(server) == g


@pytest.mark.parametrize(
    "change",
    [
        {"messages": [{"role": "user", "content": "different text"}]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "base"}]},
        {"max_tokens": 9},
        {"stop": ["zzz"]},
        {"logprobs": True},
        {"top_p": 0.5},
        {"seed": 1},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
    ],
)
def test_a_different_request_misses(server, change: dict[str, Any]) -> None:
    base = body_for("base")
    post(server, base)
    assert post(server, base)[0] == "hit"
    g = generations(server)
    header, _ = post(server, {**base, **change})
    assert header == "miss"
    assert generations(server) == g + 1


def test_cache_control_no_cache_bypasses(server) -> None:
    body = body_for("bypass me")
    post(server, body)
    g = generations(server)
    header, again = post(server, body, **{"Cache-Control": "no-cache"})
    assert header == "miss"
    assert generations(server) == g + 1
    header, hit = post(server, body)
    assert header == "hit" and answer(hit) == answer(again)
    h, raw = stream(server, body, **{"cache-control": "no-cache, no-store"})
    assert h == "miss" and generations(server) == g + 2


LONG = body_for("go on and on", max_tokens=400)  # greedy: runs the whole 400 tokens


def test_single_flight_concurrent_identical_requests_generate_once(server) -> None:
    body = {**LONG, "messages": [{"role": "user", "content": "single flight, all at once"}]}
    g = generations(server)
    barrier = threading.Barrier(4)

    def go(_: int) -> tuple[str, dict[str, Any]]:
        with httpx.Client(base_url=server.base_url, timeout=HTTP_TIMEOUT) as h:
            assert h.get("/health").status_code == 200  # connected: the POSTs leave together
            barrier.wait()
            res = h.post("/v1/chat/completions", json=body)
        assert res.status_code == 200, res.text
        return res.headers["x-omni-cache"], res.json()

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(go, range(4)))
    assert len({r[1]["id"] for r in results}) == 4
    assert generations(server) == g + 1, [r[0] for r in results]
    assert all(answer(r[1]) == answer(results[0][1]) for r in results)
    assert sorted(r[0] for r in results) == ["hit", "hit", "hit", "miss"]


def test_single_flight_followers_join_a_running_generation(server) -> None:
    body = {**LONG, "messages": [{"role": "user", "content": "single flight, staggered"}]}
    g = generations(server)
    first: dict[str, Any] = {}
    started = threading.Event()

    def leader() -> None:
        def seen(chunk: bytes) -> None:
            if chunk.count(b"data: ") >= 1:
                started.set()

        with httpx.Client(base_url=server.base_url, timeout=HTTP_TIMEOUT) as h:
            res, raw = capture(
                h, "POST", "/v1/chat/completions", json={**body, "stream": True}, on_chunk=seen
            )
        first["header"] = res.headers["x-omni-cache"]
        first["chunks"] = [json.loads(p) for p in payloads(raw)]

    t = threading.Thread(target=leader)
    t.start()
    assert started.wait(10)
    with ThreadPoolExecutor(3) as pool:
        followers = list(pool.map(lambda _: post(server, body), range(3)))
    t.join(30)
    assert first["header"] == "miss"
    assert [f[0] for f in followers] == ["hit"] * 3
    assert generations(server) == g + 1
    lead = first["chunks"]
    assert lead[-1]["choices"][0]["finish_reason"] == "length"  # generated all 400 tokens
    for _, f in followers:
        assert f["choices"][0]["message"]["content"] == streamed_answer(lead)["content"]
        assert f["choices"][0]["finish_reason"] == "length"
        assert f["usage"]["completion_tokens"] == 400


def hang_up_after(srv: ServerThread, body: dict[str, Any], chunks: int) -> str:
    """Stream, read `chunks` data frames, close the connection; returns the completion id."""
    buf = b""
    with httpx.Client(base_url=srv.base_url, timeout=10) as h:
        with h.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as res:
            assert res.status_code == 200
            for chunk in res.iter_raw():
                buf += chunk
                if buf.count(b"data: ") >= chunks:
                    break
    return str(json.loads(buf.split(b"\n\n")[0][len(b"data: ") :])["id"])


def test_a_leader_hanging_up_does_not_cut_off_its_followers(server) -> None:
    body = {**LONG, "messages": [{"role": "user", "content": "leader leaves early"}]}
    g = generations(server)
    result: dict[str, Any] = {}
    with httpx.Client(base_url=server.base_url, timeout=HTTP_TIMEOUT) as h:
        with h.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as res:
            lines = res.iter_lines()
            first_line = next(lines)
            cid = json.loads(first_line[len("data: ") :])["id"]
            run = server.state.responses.runs.get(cid)
            assert run is not None

            def follow() -> None:
                result["answer"] = post(server, body)

            follower = threading.Thread(target=follow)
            follower.start()
            assert wait_for(lambda: run.mirrors > 0, timeout=60), "the follower never joined"
        # The leader has hung up; its follower keeps the generation going.
    follower.join(30)
    header, answer_ = result["answer"]
    assert header == "hit"
    assert answer_["choices"][0]["finish_reason"] == "length"
    assert answer_["usage"]["completion_tokens"] == 400
    assert generations(server) == g + 1
    assert wait_for(lambda: last_type(db_of(server), cid) == USAGE, timeout=60)
    # It ended well, so it is cached.
    assert cid in {c for _, c, _ in cache_rows(db_of(server))}


def test_a_disconnected_stream_is_never_cached(server) -> None:
    # Still generating at the hang-up (5 chunks in), and run again in full: 800, not more.
    body = {**LONG, "max_tokens": 800, "messages": [{"role": "user", "content": "hang up on me"}]}
    cid = hang_up_after(server, body, chunks=5)
    assert wait_for(lambda: last_type(db_of(server), cid) == "completion.cancelled", timeout=60)
    assert cid not in {c for _, c, _ in cache_rows(db_of(server))}
    assert wait_for(lambda: server.state.responses.runs.get(cid) is None, timeout=60)  # ended
    g = generations(server)
    header, again = post(server, body)
    assert header == "miss"
    assert generations(server) == g + 1
    assert again["choices"][0]["finish_reason"] in ("stop", "length")
    assert again["usage"]["completion_tokens"] > 5
    check_index_points_at_finished_streams(db_of(server))


def test_a_request_right_after_a_disconnect_is_not_answered_from_the_cancelled_stream(
    server,
) -> None:
    """The same, without waiting: as soon as the server has stopped the generation for the
    gone client, an identical request must generate afresh, not follow the stream that is
    about to end cancelled (a truncated answer with no finish_reason)."""
    body = {**LONG, "max_tokens": 800, "messages": [{"role": "user", "content": "hang up, retry"}]}
    with httpx.Client(base_url=server.base_url, timeout=HTTP_TIMEOUT) as retry:
        assert retry.get("/health").status_code == 200  # connected before the hang-up
        cid = hang_up_after(server, body, chunks=5)
        run = server.state.responses.runs.get(cid)
        assert run is not None, "the generation ended before the hang-up"
        # Wait until the server noticed the hang-up and asked the engine to stop.
        assert wait_for(lambda: run.job.stop.is_set(), timeout=60, interval=0.0002)
        g = generations(server)
        res = retry.post("/v1/chat/completions", json=body)
    assert res.status_code == 200, res.text
    header, again = res.headers["x-omni-cache"], res.json()
    assert again["choices"][0]["finish_reason"] in ("stop", "length"), (header, again["choices"])
    assert header == "miss"
    assert generations(server) == g + 1


def test_every_cache_row_points_at_a_finished_stream(server) -> None:
    rows = cache_rows(db_of(server))
    assert rows, "the tests above cached completions"
    check_index_points_at_finished_streams(db_of(server))
    # Only generated completions are indexed, never their copies.
    for _, cid, _ in rows:
        accepted = json.loads(read_log(server, f"{cid}/request")[0].data)
        assert "mirror_of" not in accepted
        assert accepted["key"] is not None


# --- servers of their own: flags, bounds, restarts --------------------------------------


@pytest.fixture
def make_server(tiny_engine, tmp_path: Path) -> Iterator[Callable[..., ServerThread]]:
    running: list[ServerThread] = []

    def make(**settings: Any) -> ServerThread:
        settings.setdefault("db_path", str(tmp_path / "omni.db"))
        srv = ServerThread(Settings(keepalive=1.0, **settings), tiny_engine).start()
        running.append(srv)
        return srv

    yield make
    for srv in running:
        if srv._thread.is_alive():
            srv.stop()


class FailingEngine:
    """The tiny engine's tokenizer and template, but every generation fails after a few
    tokens (the engine's Failed output): fault injection for the error path."""

    def __init__(self, engine: Any):
        self._engine = engine
        self.model_id = engine.model_id
        self.capabilities = engine.capabilities  # the tiny model's template: its own
        self.queued = self.running = 0
        self.loading, self.load_error, self.memory_bytes, self.path = False, None, None, ""
        self.on_step = None
        self.generations = 0

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        return list(self._engine.render(messages, tools))

    def encode(self, text: str) -> list[int]:
        return list(self._engine.encode(text))

    def submit(self, job: Any) -> None:
        from omni.ports.jobs import Delta, Failed, Started

        assert job.claim()
        self.generations += 1
        for out in (Started(), Delta("par", 1), Delta("tial", 2), Failed("injected failure")):
            job.outputs.put_nowait(out)

    def close(self) -> None:
        pass


def test_generation_errors_are_never_cached(tiny_engine, tmp_path: Path) -> None:
    srv = ServerThread(
        Settings(db_path=str(tmp_path / "failing.db"), keepalive=1.0), FailingEngine(tiny_engine)
    ).start()
    try:
        body = body_for("fail me")
        with httpx.Client(base_url=srv.base_url, timeout=10) as h:
            first = h.post("/v1/chat/completions", json=body)
            assert first.status_code == 500, first.text
            assert first.headers["x-should-retry"] == "false"
            assert "injected failure" in first.json()["error"]["message"]
            # Settle: a request sent at once may still find the failed run "in flight"
            # (see test_a_request_right_after_a_disconnect_...: the same stale entry).
            assert wait_for(lambda: ended(srv), timeout=60)
            second = h.post("/v1/chat/completions", json=body)
            assert second.status_code == 500
            assert generations(srv) == 2  # generated again: the error was not replayed
            assert wait_for(lambda: ended(srv), timeout=60)
            res, raw = capture(h, "POST", "/v1/chat/completions", json={**body, "stream": True})
            assert res.headers["x-omni-cache"] == "miss"
            assert generations(srv) == 3
            frames = payloads(raw)
            assert json.loads(frames[-1])["error"]["message"] == "injected failure"
        assert cache_rows(db_of(srv)) == []
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "off",
    [{"cache": False}, {"cache_max_entries": 0}, {"cache_max_age_s": 0}],
    ids=["no-cache", "0 entries", "0 seconds"],
)
def test_no_cache_setting_never_hits(make_server, off: dict[str, Any]) -> None:
    """--no-cache, and a bound that keeps nothing: every request generates, twins too."""
    srv = make_server(**off)
    body = body_for("no cache flag")
    g = generations(srv)
    assert post(srv, body)[0] == "miss"
    assert post(srv, body)[0] == "miss"
    assert stream(srv, body)[0] == "miss"
    assert generations(srv) == g + 3
    twins = {**LONG, "messages": [{"role": "user", "content": "no single flight either"}]}
    barrier = threading.Barrier(3)

    def go(_: int) -> str:
        with httpx.Client(base_url=srv.base_url, timeout=HTTP_TIMEOUT) as h:
            assert h.get("/health").status_code == 200  # connected: the POSTs leave together
            barrier.wait()
            res = h.post("/v1/chat/completions", json=twins)
        assert res.status_code == 200, res.text
        return res.headers["x-omni-cache"]

    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(go, range(3))) == ["miss"] * 3
    assert generations(srv) == g + 6
    assert cache_rows(db_of(srv)) == []


def test_max_entries_evicts_the_oldest(make_server) -> None:
    srv = make_server(cache_max_entries=2)
    a, b, c = body_for("entry a"), body_for("entry b"), body_for("entry c")
    for body in (a, b, c):
        assert post(srv, body)[0] == "miss"
    assert len(cache_rows(db_of(srv))) == 2
    g = generations(srv)
    assert post(srv, c)[0] == "hit"
    assert post(srv, b)[0] == "hit"
    assert generations(srv) == g
    assert post(srv, a)[0] == "miss"  # evicted
    assert generations(srv) == g + 1
    assert len(cache_rows(db_of(srv))) == 2
    check_index_points_at_finished_streams(db_of(srv))


def test_max_age_expires_entries(make_server, monkeypatch: pytest.MonkeyPatch) -> None:
    srv = make_server(cache_max_age_s=60)
    body = body_for("short lived")
    assert post(srv, body)[0] == "miss"
    assert post(srv, body)[0] == "hit"  # well within its age, however slow the machine
    # The clock the log and its cache index read moves past the max age: no sleep.
    later = driver.now_ms() + 61_000
    for module in (event_store, sqlite_cache):
        monkeypatch.setattr(module, "now_ms", lambda: later)
    g = generations(srv)
    assert post(srv, body)[0] == "miss"
    assert generations(srv) == g + 1


def test_the_cache_survives_a_restart(make_server) -> None:
    first = make_server()
    body = body_for("across restarts", logprobs=True)
    _, original = post(first, body)
    first.stop()
    second = make_server()
    g = generations(second)
    header, replay = post(second, body)
    assert header == "hit"
    assert generations(second) == g
    assert answer(replay) == answer(original)


def test_a_lost_index_is_rebuilt_from_the_log(make_server) -> None:
    first = make_server()
    a, b = body_for("rebuild a"), body_for("rebuild b", seed=3, temperature=1.0)
    _, made_a = post(first, a)
    _, made_b = post(first, b)
    post(first, a)  # a hit: a copy, which must not be indexed
    post(first, body_for("rebuild random", temperature=1.0))  # not deterministic
    cancelled = hang_up_after(
        first,
        {**LONG, "max_tokens": 2000, "messages": [{"role": "user", "content": "rebuild cut"}]},
        4,
    )
    assert wait_for(
        lambda: last_type(db_of(first), cancelled) == "completion.cancelled", timeout=60
    )
    before = sorted((k, c) for k, c, _ in cache_rows(db_of(first)))
    db = db_of(first)
    first.stop()
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM chat_cache")
    conn.commit()
    conn.close()
    assert cache_rows(db) == []
    second = make_server()
    after = sorted((k, c) for k, c, _ in cache_rows(db))
    assert after == before
    assert {c for _, c in after} == {made_a["id"], made_b["id"]}
    check_index_points_at_finished_streams(db)
    g = generations(second)
    for body, made in ((a, made_a), (b, made_b)):
        header, replay = post(second, body)
        assert header == "hit"
        assert answer(replay) == answer(made)
    assert generations(second) == g


def test_a_rebuild_keeps_the_newest_entries_within_the_bound(make_server) -> None:
    first = make_server(cache_max_entries=2)
    bodies = [body_for(f"bounded rebuild {i}") for i in range(3)]
    for body in bodies:
        post(first, body)
    db = db_of(first)
    first.stop()
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM chat_cache")
    conn.commit()
    conn.close()
    second = make_server(cache_max_entries=2)
    assert len(cache_rows(db)) == 2
    assert post(second, bodies[2])[0] == "hit"
    assert post(second, bodies[1])[0] == "hit"
    assert post(second, bodies[0])[0] == "miss"


def test_a_rebuild_does_not_revive_expired_entries(
    make_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is a projection of the log: rebuilding it must give the index that was lost,
    so a completion older than cache_max_age_s stays expired."""
    first = make_server(cache_max_age_s=1.0)
    body = body_for("expired before the rebuild")
    post(first, body)
    later = driver.now_ms() + 1_300  # the clock the log and its index read, past the max age
    db = db_of(first)
    first.stop()
    for module in (event_store, sqlite_cache):
        monkeypatch.setattr(module, "now_ms", lambda: later)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM chat_cache")
    conn.commit()
    conn.close()
    second = make_server(cache_max_age_s=1.0)
    g = generations(second)
    header, _ = post(second, body)
    assert header == "miss"
    assert generations(second) == g + 1
