"""GET /metrics: Prometheus' text format, parsed by prometheus_client's own parser, moved by
exactly what the requests did (counts by route and status, the tokens the SDK saw, one replay
hit and one miss, events committed)."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.api._helpers import MODEL, UNENDING, wait_for
from tests.server import ServerThread


def scrape(server: ServerThread) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample, by name and sorted labels."""
    response = httpx.get(f"{server.base_url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_follow_the_requests(server: ServerThread, client: Any) -> None:
    before = scrape(server)
    made = client.responses.create(model=MODEL, input="hi", max_output_tokens=8)
    events = list(
        client.responses.create(model=MODEL, input="hello", max_output_tokens=6, stream=True)
    )
    streamed = events[-1].response  # response.incomplete: it ran into max_output_tokens
    chat = [
        client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": "metrics"}],
            max_tokens=5,
            temperature=0,
            store=True,  # replayable, and kept: the log's rows are what was appended
        )
        for _ in range(2)
    ]
    assert [c.headers["x-omni-cache"] for c in chat] == ["miss", "hit"]
    first_chat = chat[0].parse()
    after = scrape(server)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    route = "omni_http_requests_total"

    def counted() -> bool:  # a request is counted once its answer has gone, a moment later
        nonlocal after
        after = scrape(server)
        return moved(route, route="/v1/chat/completions", method="POST", status="200") == 2

    assert wait_for(counted)
    assert moved(route, route="/v1/responses", method="POST", status="200") == 2
    assert moved(route, route="/metrics", method="GET", status="200") >= 1  # `before`'s

    # Generated tokens only: the replayed completion made none.
    given = made.usage.input_tokens + streamed.usage.input_tokens
    produced = made.usage.output_tokens + streamed.usage.output_tokens
    assert moved("omni_input_tokens_total", api="responses") == given
    assert moved("omni_output_tokens_total", api="responses") == produced
    assert moved("omni_input_tokens_total", api="chat") == first_chat.usage.prompt_tokens
    assert moved("omni_output_tokens_total", api="chat") == first_chat.usage.completion_tokens
    assert moved("omni_generations_total", api="responses", reason="length") == 2

    assert moved("omni_replay_cache_requests_total", result="hit") == 1
    assert moved("omni_replay_cache_requests_total", result="miss") == 1

    assert moved("omni_time_to_first_token_seconds_count", api="responses") == 2
    assert moved("omni_time_to_first_token_seconds_count", api="chat") == 1
    assert moved("omni_time_per_output_token_seconds_count", api="responses") == 2
    assert moved("omni_events_appended_total") > 0
    assert moved("omni_commit_seconds_count") > 0
    assert moved("omni_batch_size_count") > 0  # engine steps with tokens
    assert value(after, "omni_jobs_queued") == 0 and value(after, "omni_jobs_running") == 0


def test_events_appended_equal_the_rows_written(server: ServerThread, client: Any) -> None:
    import sqlite3

    before = scrape(server)
    client.responses.create(model=MODEL, input="count", max_output_tokens=4)
    after = scrape(server)
    name = "omni_events_appended_total"
    with sqlite3.connect(server.app.config["OMNI"].store.path) as conn:
        rows = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    # One server on this log since it started: what it appended is what the table holds.
    assert value(after, name) == rows
    assert value(after, name) > value(before, name)


def test_unmatched_paths_share_one_route(server: ServerThread) -> None:
    before = scrape(server)
    for path in ("/nope/1", "/nope/2", "/v1/also-not-here"):
        assert httpx.get(f"{server.base_url}{path}", timeout=10).status_code == 404
    labels = {"route": "unmatched", "method": "GET", "status": "404"}
    name = "omni_http_requests_total"
    assert wait_for(
        lambda: value(scrape(server), name, **labels) - value(before, name, **labels) == 3
    )
    samples = [k for k in scrape(server) if k[0] == "omni_http_requests_total"]
    assert not any("nope" in dict(labels)["route"] for _, labels in samples)


def test_health_answers_at_both_paths(server: ServerThread) -> None:
    for path in ("/health", "/v1/health"):
        response = httpx.get(f"{server.base_url}{path}", timeout=10)
        assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_each_app_has_its_own_registry(server: ServerThread, tmp_path: Any) -> None:
    from omni.api.app import Settings

    other = ServerThread(Settings(db_path=str(tmp_path / "o.db")), server.state.engine).start()
    try:
        samples = scrape(other)
        assert value(samples, "omni_events_appended_total") == 0
        assert value(samples, "omni_input_tokens_total", api="responses") == 0
    finally:
        other.stop()


def test_prefix_cache_reuse_counts_the_cached_tokens(server: ServerThread, client: Any) -> None:
    before = scrape(server)
    text = "the same long opening of a prompt, sent twice to reuse its cache " * 3
    # The same prompt twice, in one cache namespace: the second prefill reuses the first's.
    made = [
        client.responses.create(
            model=MODEL, input=text, max_output_tokens=2, prompt_cache_key="metrics-reuse"
        )
        for _ in range(2)
    ]
    after = scrape(server)
    reused = sum(r.usage.input_tokens_details.cached_tokens for r in made)
    assert reused > 0
    name = "omni_prefix_cache_reused_tokens_total"
    got = value(after, name, api="responses", tier="memory")
    assert got - value(before, name, api="responses", tier="memory") == reused
    lookups = "omni_prefix_cache_lookups_total"
    for result, made_so in (
        ("memory", [r for r in made if r.usage.input_tokens_details.cached_tokens]),
        ("miss", [r for r in made if not r.usage.input_tokens_details.cached_tokens]),
    ):
        seen = value(after, lookups, api="responses", result=result)
        assert seen - value(before, lookups, api="responses", result=result) == len(made_so)
    assert value(after, "omni_prefix_cache_bytes", tier="memory") > 0


def test_running_jobs_are_read_at_scrape_time(server: ServerThread) -> None:
    body = {
        "model": MODEL,
        "input": "go on",
        "max_output_tokens": 100000,
        "stream": True,
        **UNENDING,  # still running when scraped, and when left
    }
    with httpx.stream("POST", f"{server.base_url}/v1/responses", json=body, timeout=30) as s:
        lines = s.iter_lines()  # held: a dropped line iterator closes the stream
        for line in lines:
            if "output_text.delta" in line:
                break
        during = scrape(server)
    assert value(during, "omni_jobs_running") == 1
    assert value(during, "omni_jobs_queued") == 0
    # Left early: cancelled at the next token, and the gauge goes back to 0.
    assert wait_for(lambda: value(scrape(server), "omni_jobs_running") == 0, timeout=30)
    after = scrape(server)
    assert value(after, "omni_generations_total", api="responses", reason="cancelled") >= 1


def test_a_message_is_counted_under_its_api(server: ServerThread) -> None:
    """Anthropic's Messages: generations, tokens and the first token under api="messages";
    a replayed twin generated nothing (one replay-cache hit)."""
    before = scrape(server)
    body = {
        "model": MODEL,
        "max_tokens": 5,
        "temperature": 0,
        "messages": [{"role": "user", "content": "metrics for messages"}],
    }
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        made = [http.post("/v1/messages", json=body) for _ in range(2)]
    assert [m.headers["x-omni-cache"] for m in made] == ["miss", "hit"]
    usage = made[0].json()["usage"]
    after = scrape(server)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    def generations(samples: dict[Any, float]) -> float:
        return sum(
            v
            for (name, labels), v in samples.items()
            if name == "omni_generations_total" and dict(labels).get("api") == "messages"
        )

    assert generations(after) - generations(before) == 1
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    assert moved("omni_input_tokens_total", api="messages") == prompt
    assert moved("omni_output_tokens_total", api="messages") == usage["output_tokens"]
    assert moved("omni_time_to_first_token_seconds_count", api="messages") == 1
    assert moved("omni_replay_cache_requests_total", result="hit") == 1
    assert moved("omni_replay_cache_requests_total", result="miss") == 1
