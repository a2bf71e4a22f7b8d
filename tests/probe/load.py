"""Many clients at once: each sends a mix of requests (responses plain and streamed, chat,
legacy completions); every answer must be a 200 that ends properly."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.probe.fuzz import Request, check

MIX = [
    Request("POST", "/v1/responses", body={"input": "hi", "max_output_tokens": 8}),
    Request("POST", "/v1/responses", body={"input": "hi", "max_output_tokens": 8, "stream": True}),
    Request(
        "POST",
        "/v1/chat/completions",
        body={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True},
    ),
    Request("POST", "/v1/completions", body={"prompt": "hi", "max_tokens": 8}),
]


def one_client(base: str, requests: int, offset: int) -> Counter[str]:
    tally: Counter[str] = Counter()
    with httpx.Client(base_url=base, timeout=300) as http:
        for i in range(requests):
            request = MIX[(offset + i) % len(MIX)]
            tally["requests"] += 1
            try:
                with http.stream(request.method, request.path, json=request.body) as answer:
                    raw = b"".join(answer.iter_bytes())
            except httpx.TimeoutException:
                tally["hangs"] += 1
                continue
            tally["errors"] += answer.status_code != 200 or check(answer, raw) is not None
    return tally


def load(base: str, clients: int, requests: int) -> Counter[str]:
    with ThreadPoolExecutor(clients) as pool:
        parts = pool.map(lambda c: one_client(base, requests, c), range(clients))
        return sum(parts, Counter())
