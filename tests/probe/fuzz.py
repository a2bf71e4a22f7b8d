"""Requests for every endpoint, drawn by hypothesis: valid bodies with fields swapped for
random JSON, dropped or pushed to extremes, ids of every kind, odd bodies and headers. A
`Probe` sends one and checks what any answer must be: no 5xx, an error in its API's shape
(OpenAI's, or Anthropic's under /v1/messages) naming no driver or traceback, a stream that
ends, an answer within the timeout."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import strategies as st

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, 1, -1, 2, 20, 21, 2048, 10**23])
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
TEXT = st.text(min_size=1, max_size=60) | st.sampled_from(
    ["hi", "Tell me a story.", "\u00e9\u4e2d\U0001f600"]
)
MODEL = st.sampled_from(["tiny-llama", None]) | st.text(max_size=12)
ROLES = st.sampled_from(["user", "assistant", "system", "developer", "tool", "nobody"])

ITEM = st.one_of(
    st.fixed_dictionaries({"role": ROLES, "content": TEXT | JSON}),
    st.fixed_dictionaries(
        {
            "type": st.just("message"),
            "role": ROLES,
            "content": st.lists(
                st.fixed_dictionaries(
                    {
                        "type": st.sampled_from(["input_text", "output_text", "input_image"]),
                        "text": TEXT | JSON,
                    }
                ),
                max_size=3,
            ),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": TEXT, "name": TEXT, "arguments": TEXT | JSON}
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": TEXT, "output": TEXT | JSON}
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["item_reference", "reasoning", "bogus"]), "id": TEXT}
    ),
    JSON,
)
TOOL = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["function", "web_search", "x"]),
        "name": TEXT,
        "parameters": st.just({"type": "object", "properties": {"q": {"type": "string"}}}) | JSON,
    }
)
FORMAT = (
    st.sampled_from(
        [
            {"type": "text"},
            {"type": "json_object"},
            {
                "type": "json_schema",
                "name": "a",
                "schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
            },
            {"type": "json_schema", "name": "bad", "schema": {"type": "bogus"}},
        ]
    )
    | JSON
)
SMALL = st.integers(1, 6)
TOKENS = SMALL | st.sampled_from([0, -1, 10**23, 2**63]) | JSON

RESPONSE_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": MODEL,
    "input": TEXT | st.lists(ITEM, max_size=5) | JSON,
    "instructions": TEXT | JSON,
    "max_output_tokens": TOKENS,
    "temperature": st.floats(-1, 3) | JSON,
    "top_p": st.floats(-1, 2) | JSON,
    "stream": st.booleans() | JSON,
    "background": st.booleans(),
    "store": st.booleans() | JSON,
    "tools": st.lists(TOOL, max_size=2) | JSON,
    "tool_choice": st.sampled_from(["auto", "none", "required", "sometimes"]) | JSON,
    "text": st.fixed_dictionaries({"format": FORMAT}) | JSON,
    "truncation": st.sampled_from(["auto", "disabled", "sometimes"]),
    "metadata": st.dictionaries(st.text(max_size=70), st.text(max_size=20), max_size=3) | JSON,
    "include": st.lists(
        st.sampled_from(["message.output_text.logprobs", "reasoning.encrypted_content", "x"]),
        max_size=2,
    ),
    "top_logprobs": st.integers(-1, 25),
    "reasoning": st.fixed_dictionaries({"effort": st.sampled_from(["low", "high", "none", "max"])})
    | JSON,
    "seed": st.integers(-5, 2**64) | JSON,
    "previous_response_id": TEXT,
    "parallel_tool_calls": st.booleans() | JSON,
}
MESSAGE = st.fixed_dictionaries({"role": ROLES, "content": TEXT | JSON}) | JSON
CHAT_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": MODEL,
    "messages": st.lists(MESSAGE, max_size=4) | JSON,
    "max_tokens": TOKENS,
    "max_completion_tokens": TOKENS,
    "temperature": st.sampled_from([0, 0.7]) | st.floats(-1, 3) | JSON,
    "seed": st.integers(-5, 2**64) | JSON,
    "stream": st.booleans() | JSON,
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | JSON,
    "stop": TEXT | st.lists(TEXT, max_size=5) | JSON,
    "n": st.integers(0, 3),
    "logprobs": st.booleans() | JSON,
    "top_logprobs": st.integers(-1, 25),
    "response_format": FORMAT,
    "tools": st.lists(
        st.fixed_dictionaries({"type": st.just("function"), "function": TOOL}), max_size=2
    )
    | JSON,
    "tool_choice": st.sampled_from(["auto", "none", "required"]) | JSON,
    "store": st.booleans() | JSON,
    "metadata": st.dictionaries(st.text(max_size=70), st.text(max_size=20), max_size=3) | JSON,
}
TEXT_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": MODEL,
    "prompt": TEXT | st.lists(TEXT, max_size=2) | JSON,
    "max_tokens": TOKENS,
    "echo": st.booleans() | JSON,
    "logprobs": st.integers(-1, 6) | JSON,
    "stream": st.booleans() | JSON,
    "stop": TEXT | JSON,
    "temperature": st.floats(-1, 3) | JSON,
}
BLOCK = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT | JSON}),
    st.fixed_dictionaries(
        {
            "type": st.just("image"),
            "source": st.fixed_dictionaries(
                {
                    "type": st.sampled_from(["base64", "url", "file"]),
                    "media_type": st.sampled_from(["image/png", "text/plain"]),
                    "data": st.sampled_from(["", "aGk=", "not base64"]),
                    "url": st.sampled_from(["http://127.0.0.1:9/x.png", "file:///etc/passwd"]),
                }
            ),
        }
    ),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": TEXT, "name": TEXT, "input": JSON}),
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": TEXT, "content": TEXT | JSON}
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["thinking", "redacted_thinking", "document"]), "thinking": TEXT}
    ),
    JSON,
)
ANTHROPIC_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": TEXT | st.lists(BLOCK, max_size=3) | JSON,
    }
)
MESSAGES_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": MODEL,
    "messages": st.lists(ANTHROPIC_MESSAGE, max_size=4) | JSON,
    "max_tokens": TOKENS,
    "system": TEXT | st.lists(BLOCK, max_size=2) | JSON,
    "stop_sequences": st.lists(TEXT, max_size=6) | JSON,
    "temperature": st.sampled_from([0, 0.7]) | st.floats(-1, 3) | JSON,
    "top_k": st.integers(-1, 50) | JSON,
    "stream": st.booleans() | JSON,
    "tools": st.lists(
        st.fixed_dictionaries(
            {
                "name": TEXT,
                "input_schema": st.just({"type": "object", "properties": {}}) | JSON,
                "type": st.sampled_from(["custom", "web_search_20250305"]) | st.none(),
            }
        ),
        max_size=2,
    )
    | JSON,
    "tool_choice": st.sampled_from(
        [{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "x"}, {"type": "none"}]
    )
    | JSON,
    "thinking": st.sampled_from(
        [{"type": "enabled", "budget_tokens": 2}, {"type": "disabled"}, {"type": "enabled"}]
    )
    | JSON,
    "output_config": st.fixed_dictionaries(
        {"effort": st.sampled_from(["low", "max", "x"]), "format": FORMAT}
    )
    | JSON,
    "metadata": st.fixed_dictionaries({"user_id": TEXT | JSON}) | JSON,
    "context_management": JSON,
}
BASES = {
    "/v1/messages": (
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        MESSAGES_FIELDS,
    ),
    "/v1/messages/count_tokens": (
        {"messages": [{"role": "user", "content": "hi"}]},
        MESSAGES_FIELDS,
    ),
    "/v1/responses": ({"input": "hi", "max_output_tokens": 3}, RESPONSE_FIELDS),
    "/v1/chat/completions": (
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        CHAT_FIELDS,
    ),
    "/v1/completions": ({"prompt": "hi", "max_tokens": 3}, TEXT_FIELDS),
    "/v1/responses/input_tokens": ({"input": "hi"}, RESPONSE_FIELDS),
    "/v1/conversations": (
        {"items": [{"role": "user", "content": "hi"}]},
        {"items": RESPONSE_FIELDS["input"], "metadata": RESPONSE_FIELDS["metadata"]},
    ),
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    params: dict[str, str] = field(default_factory=dict)
    body: Any = None  # JSON, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # hypothesis prints it when a check fails
        body = self.body if isinstance(self.body, bytes) else json.dumps(self.body)[:400]
        return f"{self.method} {self.path} {self.params} {body!r} {self.headers}"


@st.composite
def create_body(draw: st.DrawFn, path: str) -> dict[str, Any]:
    """A valid body with some fields replaced, dropped or added."""
    base, fields = BASES[path]
    body = dict(base)
    for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=5, unique=True)):
        body[name] = draw(fields[name])
    for name in draw(st.lists(st.sampled_from(sorted(body)), max_size=1)):
        del body[name]
    return body


def ids(known: list[str]) -> st.SearchStrategy[str]:
    """Real ids of every kind (a response's on chat's endpoints too), and made-up ones."""
    made_up = st.text(
        st.characters(codec="utf-8", exclude_characters="/?#%"), min_size=1, max_size=30
    )
    real = st.sampled_from(known) if known else st.nothing()
    return (
        real
        | made_up
        | st.sampled_from(["resp_x", "chatcmpl-x", "cmpl-x", "msg_x", "conv_x", ".."])
    )


def requests(known: list[str]) -> st.SearchStrategy[Request]:
    """A request to any endpoint."""
    creates = st.sampled_from(sorted(BASES)).flatmap(
        lambda p: create_body(p).map(lambda b: Request("POST", p, body=b))
    )
    some_id = ids(known)
    query = st.dictionaries(
        st.sampled_from(
            ["stream", "starting_after", "after", "limit", "order", "include[]", "model"]
        ),
        st.sampled_from(
            ["true", "false", "-1", "0", "5", "101", "asc", "desc", "x", "99999999999999999999"]
        ),
        max_size=3,
    )
    reads = st.builds(
        lambda kind, rid, q: Request(kind[0], kind[1].format(quote(rid, safe="")), params=q),
        st.sampled_from(
            [
                ("GET", "/v1/responses/{}"),
                ("GET", "/v1/responses/{}/input_items"),
                ("POST", "/v1/responses/{}/cancel"),
                ("DELETE", "/v1/responses/{}"),
                ("GET", "/v1/chat/completions/{}"),
                ("GET", "/v1/chat/completions/{}/messages"),
                ("DELETE", "/v1/chat/completions/{}"),
                ("GET", "/v1/models/{}"),
                ("GET", "/v1/messages/{}"),
                ("DELETE", "/v1/messages/{}"),
                ("GET", "/v1/conversations/{}"),
                ("DELETE", "/v1/conversations/{}"),
                ("GET", "/v1/conversations/{}/items"),
                ("GET", "/v1/conversations/{}/items/msg_x"),
                ("DELETE", "/v1/conversations/{}/items/msg_x"),
            ]
        ),
        some_id,
        query,
    )
    lists = st.builds(
        lambda path, q: Request("GET", path, params=q),
        st.sampled_from(["/v1/chat/completions", "/v1/models", "/health", "/metrics"]),
        query,
    )
    updates = st.builds(
        lambda path, rid, body: Request("POST", path.format(quote(rid, safe="")), body=body),
        st.sampled_from(
            ["/v1/chat/completions/{}", "/v1/conversations/{}", "/v1/conversations/{}/items"]
        ),
        some_id,
        st.fixed_dictionaries({"metadata": RESPONSE_FIELDS["metadata"]})
        | st.fixed_dictionaries({"items": RESPONSE_FIELDS["input"]})
        | JSON,
    )
    odd = st.builds(
        lambda path, body, ctype: Request("POST", path, body=body, headers={"content-type": ctype}),
        st.sampled_from(sorted(BASES)),
        st.binary(max_size=64)
        | st.sampled_from(
            [b"", b"[]", b"null", b"{", b'{"input": "\\ud800"}', b"[" * 5000 + b"]" * 5000]
        ),
        st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded"]),
    )
    return creates | reads | lists | updates | odd


@dataclass
class Probe:
    """Sends requests and keeps the tally; `check` says what is wrong with an answer."""

    client: httpx.Client
    tally: Counter[str] = field(default_factory=Counter)
    last: Request | None = None  # the request before, which a dropped connection may owe to

    def send(self, request: Request) -> str | None:
        """The first broken rule, or None."""
        self.tally["requests"] += 1
        kwargs: dict[str, Any] = {"params": request.params, "headers": request.headers}
        if isinstance(request.body, bytes):
            kwargs["content"] = request.body
        elif request.body is not None:  # NaN and Infinity too, as Python's json writes them
            kwargs["content"] = json.dumps(request.body).encode()
            kwargs["headers"] = {"content-type": "application/json", **request.headers}
        try:
            with self.client.stream(request.method, request.path, **kwargs) as answer:
                raw = b"".join(answer.iter_bytes())
        except httpx.TimeoutException:
            self.tally["hangs"] += 1
            return "no answer within the timeout"
        except httpx.RemoteProtocolError as exc:
            self.tally["dropped connections"] += 1
            return f"{exc} (the request before: {self.last!r})"
        finally:
            self.last = request
        self.tally[f"{answer.status_code // 100}xx"] += 1
        # The path the server was sent (a client resolves ".." before it asks).
        anthropic = answer.request.url.path.startswith("/v1/messages")
        problem = check(answer, raw, anthropic=anthropic)
        if problem is not None:
            self.tally["broken"] += 1
        return problem


def check(answer: httpx.Response, raw: bytes, anthropic: bool = False) -> str | None:
    """`anthropic`: an answer of Anthropic's API, whose errors are its own shape."""
    status = answer.status_code
    if status >= 500:
        return f"a {status}: {raw[:300]!r}"
    if status >= 400:
        try:
            body = json.loads(raw)
            error = body["error"]
        except (ValueError, KeyError, TypeError):
            return f"a {status} that is not an error body: {raw[:300]!r}"
        if not isinstance(error.get("message"), str) or not error["message"]:
            return f"an error without a message: {error}"
        fields = ("type",) if anthropic else ("type", "param", "code")
        if not all(k in error for k in fields) or (anthropic and body.get("type") != "error"):
            return f"an error missing {'/'.join(fields)}: {body}"
        text = error["message"].lower()
        if any(leak in text for leak in ("traceback", "sqlite", "sqlalchemy", "operationalerror")):
            return f"an error carrying driver or exception text: {error}"
        return None
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        frames = [f for f in raw.split(b"\n\n") if f.strip() and not f.startswith(b":")]
        last = frames[-1] if frames else b""
        ends = (
            b"data: [DONE]",
            b"event: response.completed",
            b"event: response.incomplete",
            b"event: response.failed",
            b"event: response.cancelled",
            b"event: message_stop",
            b"event: error",
        )
        if not any(end in last for end in ends):
            return f"a stream that does not end: {last[:200]!r}"
    return None
