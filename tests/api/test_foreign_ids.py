"""Each API answers 404 for ids that are not its own: a chat or legacy completion's id on the
Responses endpoints, a response's id on the stored chat completions endpoints, ids of neither
kind; and none of those requests writes anything to the log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from openai import NotFoundError, OpenAI

from tests.api._helpers import MODEL, assert_error, high_water


@pytest.fixture(scope="module")
def objects(server: Any) -> dict[str, str]:
    """One object of each kind, finished: a response, a stored and an unstored chat
    completion, a legacy completion."""
    with OpenAI(base_url=f"{server.base_url}/v1", api_key="test", max_retries=0) as client:
        response = client.responses.create(model=MODEL, input="hi", max_output_tokens=2)
        chat = [
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"hi {store}"}],
                max_tokens=2,
                store=store,
            ).id
            for store in (True, False)
        ]
        legacy = client.completions.create(model=MODEL, prompt="hi", max_tokens=2).id
    return {"response": response.id, "chat": chat[0], "unstored": chat[1], "legacy": legacy}


NOT_RESPONSES = ("chat", "unstored", "legacy")

RESPONSES_CALLS: dict[str, Callable[[OpenAI, str], Any]] = {
    "retrieve": lambda c, i: c.responses.retrieve(i),
    "stream replay": lambda c, i: list(c.responses.retrieve(i, stream=True)),
    "input_items": lambda c, i: c.responses.input_items.list(i),
    "cancel": lambda c, i: c.responses.cancel(i),
    "delete": lambda c, i: c.responses.delete(i),
}

CHAT_CALLS: dict[str, Callable[[OpenAI, str], Any]] = {
    "retrieve": lambda c, i: c.chat.completions.retrieve(i),
    "messages": lambda c, i: c.chat.completions.messages.list(i),
    "update": lambda c, i: c.chat.completions.update(i, metadata={"k": "v"}),
    "delete": lambda c, i: c.chat.completions.delete(i),
}


@pytest.mark.parametrize("call", RESPONSES_CALLS)
@pytest.mark.parametrize("kind", NOT_RESPONSES)
def test_a_completion_id_is_404_on_every_responses_endpoint(
    client: OpenAI, server: Any, objects: dict[str, str], kind: str, call: str
) -> None:
    before = high_water(server)
    with pytest.raises(NotFoundError):
        RESPONSES_CALLS[call](client, objects[kind])
    assert high_water(server) == before  # DELETE wrote no tombstone into the chat stream


@pytest.mark.parametrize("call", CHAT_CALLS)
@pytest.mark.parametrize("kind", ["response", "legacy"])
def test_a_response_or_legacy_id_is_404_on_every_chat_endpoint(
    client: OpenAI, server: Any, objects: dict[str, str], kind: str, call: str
) -> None:
    before = high_water(server)
    with pytest.raises(NotFoundError):
        CHAT_CALLS[call](client, objects[kind])
    assert high_water(server) == before


@pytest.mark.parametrize(
    "foreign",
    ["nothing", "resp_", "chatcmpl-", "cmpl-", "msg_0", "{chat}/request", "{response}/request"],
)
def test_ids_of_neither_kind_are_404_everywhere(
    http: httpx.Client, server: Any, objects: dict[str, str], foreign: str
) -> None:
    rid = foreign.format(**objects).replace("/", "%2F")  # an internal stream's name, quoted
    before = high_water(server)
    for method, path in [
        ("GET", f"/v1/responses/{rid}"),
        ("GET", f"/v1/responses/{rid}?stream=true"),
        ("GET", f"/v1/responses/{rid}/input_items"),
        ("POST", f"/v1/responses/{rid}/cancel"),
        ("DELETE", f"/v1/responses/{rid}"),
        ("GET", f"/v1/chat/completions/{rid}"),
        ("GET", f"/v1/chat/completions/{rid}/messages"),
        ("DELETE", f"/v1/chat/completions/{rid}"),
    ]:
        assert_error(http.request(method, path), 404)
    res = http.post(f"/v1/chat/completions/{rid}", json={"metadata": {"k": "v"}})
    assert_error(res, 404)
    assert high_water(server) == before


def test_the_objects_themselves_are_still_served(client: OpenAI, objects: dict[str, str]) -> None:
    """The 404s above are of the wrong kind only: each API still serves its own."""
    assert client.responses.retrieve(objects["response"]).id == objects["response"]
    assert client.chat.completions.retrieve(objects["chat"]).id == objects["chat"]


def test_a_chat_id_is_no_previous_response(
    client: OpenAI, http: httpx.Client, server: Any, objects: dict[str, str]
) -> None:
    before = high_water(server)
    res = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": "next", "previous_response_id": objects["chat"]},
    )
    assert_error(res, 400, param="previous_response_id", code="previous_response_not_found")
    assert high_water(server) == before
