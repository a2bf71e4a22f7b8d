"""Error bodies and status codes; tolerated extras; the models endpoints; path prefixes."""

from __future__ import annotations

import httpx
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from tests.api._helpers import MODEL, assert_error


def test_malformed_json_is_400(http: httpx.Client) -> None:
    res = http.post(
        "/v1/responses",
        content=b'{"model": "tiny-llama", "input": ',
        headers={"content-type": "application/json"},
    )
    assert_error(res, 400)


def test_invalid_utf8_is_400(http: httpx.Client) -> None:
    res = http.post(
        "/v1/responses",
        content=b'{"input": "\xff\xfe"}',
        headers={"content-type": "application/json"},
    )
    assert_error(res, 400)


@pytest.mark.parametrize("body", [b"[1, 2]", b'"hello"', b"42", b"null", b""])
def test_body_not_an_object_is_400(http: httpx.Client, body: bytes) -> None:
    res = http.post("/v1/responses", content=body, headers={"content-type": "application/json"})
    assert_error(res, 400)


def test_temperature_out_of_range_is_400_naming_it(client: OpenAI, http: httpx.Client) -> None:
    res = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "temperature": 5})
    assert_error(res, 400, param="temperature")
    with pytest.raises(BadRequestError) as exc:
        client.responses.create(model=MODEL, input="hi", temperature=5)
    assert exc.value.param == "temperature"
    assert exc.value.status_code == 400


@pytest.mark.parametrize(
    ("field", "value"),
    [("top_p", 0), ("top_p", 1.5), ("max_output_tokens", 0), ("top_logprobs", 21)],
)
def test_other_out_of_range_params_are_400(http: httpx.Client, field: str, value: object) -> None:
    res = http.post("/v1/responses", json={"model": MODEL, "input": "hi", field: value})
    assert_error(res, 400, param=field)


def test_unknown_model_is_404_model_not_found(client: OpenAI, http: httpx.Client) -> None:
    res = http.post("/v1/responses", json={"model": "gpt-nope", "input": "hi"})
    assert_error(res, 404, code="model_not_found", param="model")
    with pytest.raises(NotFoundError) as exc:
        client.responses.create(model="gpt-nope", input="hi")
    assert exc.value.code == "model_not_found"


@pytest.mark.parametrize(
    ("method", "suffix"), [("GET", ""), ("GET", "/input_items"), ("DELETE", "")]
)
def test_unknown_response_id_is_404(http: httpx.Client, method: str, suffix: str) -> None:
    res = http.request(method, f"/v1/responses/resp_0000000000{suffix}")
    assert_error(res, 404)


def test_unknown_response_id_with_stream_is_404(client: OpenAI, http: httpx.Client) -> None:
    assert_error(http.get("/v1/responses/resp_0000", params={"stream": "true"}), 404)
    with pytest.raises(NotFoundError):
        client.responses.retrieve("resp_0000")
    with pytest.raises(NotFoundError):
        client.responses.retrieve("resp_0000", stream=True)


def test_unknown_top_level_keys_are_accepted(client: OpenAI, http: httpx.Client) -> None:
    res = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": "hi", "max_output_tokens": 2, "verbosity": "low", "foo": 1},
    )
    assert res.status_code == 200, res.text
    r = client.responses.create(
        model=MODEL,
        input="hi",
        max_output_tokens=2,
        extra_body={"foo": {"bar": 1}, "verbosity": "high"},
    )
    assert r.status in ("completed", "incomplete")


def test_bad_stream_request_fails_before_any_sse_bytes(client: OpenAI, http: httpx.Client) -> None:
    with http.stream(
        "POST",
        "/v1/responses",
        json={"model": MODEL, "input": "hi", "stream": True, "temperature": 5},
    ) as res:
        body = res.read()
    assert res.status_code == 400
    assert not res.headers["content-type"].startswith("text/event-stream")
    assert not body.startswith(b"event:")
    assert_error(res, 400, param="temperature")
    with pytest.raises(BadRequestError) as exc:
        client.responses.create(model=MODEL, input="hi", stream=True, temperature=5)
    assert exc.value.param == "temperature"
    with pytest.raises(NotFoundError):
        client.responses.create(model="nope", input="hi", stream=True)


@pytest.mark.parametrize(
    "item",
    [
        {"type": "computer_call", "id": "cu_1", "call_id": "c", "action": {"type": "click"}},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "item_reference", "id": "msg_123"},
        "not an object",
    ],
)
def test_unsupported_input_item_is_400(http: httpx.Client, item: object) -> None:
    res = http.post("/v1/responses", json={"model": MODEL, "input": [item]})
    err = assert_error(res, 400)
    assert err["param"] is not None and err["param"].startswith("input")


def test_invalid_message_item_is_400(http: httpx.Client) -> None:
    res = http.post(
        "/v1/responses", json={"model": MODEL, "input": [{"role": "robot", "content": "x"}]}
    )
    assert_error(res, 400)
    res = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
    )
    assert_error(res, 400)


def test_empty_input_is_400(http: httpx.Client) -> None:
    assert_error(http.post("/v1/responses", json={"model": MODEL}), 400, param="input")
    assert_error(http.post("/v1/responses", json={"model": MODEL, "input": []}), 400, param="input")


def test_hosted_tools_are_ignored(client: OpenAI) -> None:
    fn = {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {}},
        "strict": False,
    }
    r = client.responses.create(
        model=MODEL,
        input="search the web",
        tools=[{"type": "web_search"}, fn, {"type": "file_search", "vector_store_ids": ["vs_1"]}],
        max_output_tokens=2,
    )
    assert r.status in ("completed", "incomplete")
    assert [t.type for t in r.tools] == ["function"]
    assert r.tools[0].name == "lookup"
    only_hosted = client.responses.create(
        model=MODEL, input="x", tools=[{"type": "web_search"}], max_output_tokens=1
    )
    assert only_hosted.tools == []


def test_error_on_unknown_route_has_openai_shape(http: httpx.Client) -> None:
    res = http.get("/v1/nothing-here")
    assert_error(res, 404)


def test_models_list(client: OpenAI, http: httpx.Client) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].object == "model"
    raw = http.get("/v1/models").json()
    assert raw["object"] == "list" and raw["data"][0]["id"] == MODEL
    assert http.get("/models").json() == raw


def test_models_retrieve(client: OpenAI, http: httpx.Client) -> None:
    m = client.models.retrieve(MODEL)
    assert m.id == MODEL and m.object == "model" and isinstance(m.created, int)
    assert http.get(f"/models/{MODEL}").json()["id"] == MODEL
    with pytest.raises(NotFoundError):
        client.models.retrieve("nope")
    assert_error(http.get("/v1/models/nope"), 404, code="model_not_found")


@pytest.mark.parametrize("prefix", ["", "/v1"])
def test_paths_with_and_without_prefix(http: httpx.Client, prefix: str) -> None:
    res = http.post(
        f"{prefix}/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 1}
    )
    assert res.status_code == 200
    rid = res.json()["id"]
    assert http.get(f"{prefix}/responses/{rid}").status_code == 200
    assert http.get(f"{prefix}/responses/{rid}/input_items").status_code == 200
    assert http.get(f"{prefix}/models").status_code == 200
    assert http.delete(f"{prefix}/responses/{rid}").status_code == 200


def test_an_unknown_conversation_is_a_404_naming_it(http: httpx.Client) -> None:
    res = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "conversation": "conv_1"})
    assert_error(res, 404, param="conversation")
    res = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "conversation": 7})
    assert_error(res, 400, param="conversation")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", b'{"model": "tiny-llama", "input": "hi \\ud800"}'),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\udfff"}]}'),
        ("/v1/chat/completions/chatcmpl-x", b'{"metadata": {"k": "\\ud800"}}'),
    ],
)
def test_a_lone_surrogate_escape_is_400(http: httpx.Client, path: str, body: bytes) -> None:
    """Valid JSON, but no text (nor the log) can hold it: a 400, and the server stays well."""
    res = http.post(path, content=body, headers={"content-type": "application/json"})
    assert_error(res, 400)
    assert "surrogate" in res.json()["error"]["message"]
    paired = b'{"model": "tiny-llama", "input": "\\ud83d\\ude00", "max_output_tokens": 2}'
    ok = http.post("/v1/responses", content=paired, headers={"content-type": "application/json"})
    assert ok.status_code == 200, ok.text  # a surrogate pair is an emoji, and fine


@pytest.mark.parametrize("depth", [200, 900, 1000, 100_000])
@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
def test_deeply_nested_json_is_400_not_500(http: httpx.Client, path: str, depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    body = b'{"model": "tiny-llama", "max_output_tokens": 1, "max_tokens": 1, "metadata": '
    res = http.post(
        path,
        content=body + nested + b', "input": "hi", "messages": []}',
        headers={"content-type": "application/json"},
    )
    assert_error(res, 400)
    inside = b'{"model": "tiny-llama", "input": [{"role": "user", "content": "hi", "x": '
    res = http.post(
        "/v1/responses",
        content=inside + nested + b"}], " + b'"max_output_tokens": 1}',
        headers={"content-type": "application/json"},
    )
    assert res.status_code in (200, 400), res.text[:300]
