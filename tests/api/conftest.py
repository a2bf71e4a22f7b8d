"""Fixtures for the end-to-end API tests (the `server` and `client` fixtures live in
tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest


@pytest.fixture
def http(server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    """A raw HTTP client for byte-level checks (headers, SSE bytes, error bodies)."""
    with httpx.Client(
        base_url=server.base_url,
        timeout=httpx.Timeout(10.0),
        headers={"authorization": "Bearer test"},
    ) as c:
        yield c
