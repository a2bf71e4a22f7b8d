"""DELETE /v1/responses/{id}: a tombstone in the log, never an UPDATE or DELETE."""

from __future__ import annotations

import httpx
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from tests.api._helpers import MODEL, assert_error, read_log


def test_delete_with_the_sdk(client: OpenAI, server) -> None:  # type: ignore[no-untyped-def]
    r = client.responses.create(model=MODEL, input="delete me", max_output_tokens=3)
    before = read_log(server, r.id)
    assert before and before[-1].type in ("response.completed", "response.incomplete")
    assert client.responses.delete(r.id) is None
    with pytest.raises(NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(NotFoundError):
        client.responses.retrieve(r.id, stream=True)
    with pytest.raises(NotFoundError):
        client.responses.input_items.list(r.id)
    with pytest.raises(NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(BadRequestError) as exc:
        client.responses.create(model=MODEL, previous_response_id=r.id, input="next")
    assert exc.value.code == "previous_response_not_found"
    # The log keeps every event of the response, plus one tombstone on the request stream.
    after = read_log(server, r.id)
    assert [(e.position, e.seq, e.type, e.data) for e in after] == [
        (e.position, e.seq, e.type, e.data) for e in before
    ]
    request = read_log(server, f"{r.id}/request")
    assert [e.type for e in request] == ["omni.request.accepted", "omni.response.deleted"]
    assert [e.seq for e in request] == [0, 1]


def test_delete_raw_body(http: httpx.Client, server) -> None:  # type: ignore[no-untyped-def]
    rid = http.post(
        "/v1/responses", json={"model": MODEL, "input": "raw delete", "max_output_tokens": 2}
    ).json()["id"]
    res = http.delete(f"/v1/responses/{rid}")
    assert res.status_code == 200
    assert res.headers["content-type"].startswith("application/json")
    assert res.json() == {"id": rid, "object": "response.deleted", "deleted": True}
    assert_error(http.get(f"/v1/responses/{rid}"), 404)
    assert_error(http.get(f"/v1/responses/{rid}/input_items"), 404)
    assert_error(http.delete(f"/v1/responses/{rid}"), 404)
    # Deleting twice wrote one tombstone only.
    assert [e.type for e in read_log(server, f"{rid}/request")] == [
        "omni.request.accepted",
        "omni.response.deleted",
    ]


def test_delete_under_the_unprefixed_path(http: httpx.Client) -> None:
    rid = http.post(
        "/responses", json={"model": MODEL, "input": "x", "max_output_tokens": 1}
    ).json()["id"]
    res = http.delete(f"/responses/{rid}")
    assert res.status_code == 200 and res.json()["deleted"] is True
    assert_error(http.get(f"/v1/responses/{rid}"), 404)


def test_delete_unknown_is_404(client: OpenAI, http: httpx.Client) -> None:
    with pytest.raises(NotFoundError):
        client.responses.delete("resp_unknown")
    assert_error(http.delete("/v1/responses/resp_unknown"), 404)


def test_delete_one_leaves_others(client: OpenAI) -> None:
    a = client.responses.create(model=MODEL, input="a", max_output_tokens=1)
    b = client.responses.create(model=MODEL, input="b", max_output_tokens=1)
    client.responses.delete(a.id)
    assert client.responses.retrieve(b.id).id == b.id
