"""A 500 never carries an exception's text: a store's error (a driver's message, a file's
path) or anything unexpected reads as OpenAI's generic server error; the log keeps the text."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from omni.errors import SERVER_ERROR, SeqConflict, StoreError
from tests.api._helpers import assert_error

SECRET = "disk I/O error in /home/someone/private/omni.db"


def failing(exc: Exception) -> Any:
    async def fail(*_: Any, **__: Any) -> Any:
        raise exc

    return fail


@pytest.mark.parametrize(
    "exc",
    [
        StoreError(f"read failed: {SECRET}"),
        SeqConflict(f"append conflict: {SECRET}"),
        RuntimeError(SECRET),
        KeyError(SECRET),
    ],
    ids=["store", "conflict", "unexpected", "key"],
)
def test_a_500_says_only_that_the_server_had_an_error(
    http: httpx.Client,
    server: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    exc: Exception,
) -> None:
    monkeypatch.setattr(server.state.store, "read", failing(exc))
    for path in ("/v1/responses/resp_1", "/v1/chat/completions/chatcmpl-1"):
        res = http.get(path)
        error = assert_error(res, 500, code="server_error", param=None, type_="server_error")
        assert error["message"] == SERVER_ERROR
        assert SECRET not in res.text
        assert res.headers["x-should-retry"] == "false"
    assert SECRET in caplog.text  # for the operator
