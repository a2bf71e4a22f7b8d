"""The web inspector's HTTP side (omni/api/inspector.py): open static pages, JSON behind the
key and per key, the Host check in front of both. The browser tests are in
test_inspector_browser.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.api._browser import keyed_server, logged
from tests.api._helpers import MODEL
from tests.server import ServerThread

KEY_A = "sk-alice-" + "a" * 24
KEY_B = "sk-bob-" + "b" * 24
KEY_OPS = "sk-ops-" + "o" * 24
PAGES = ["/inspect", "/inspect/", "/inspect/resp_anything"]
STATIC = ["index.html", "object.html", "common.js", "list.js", "object.js", "follow.js"]
STATIC += ["chart.js", "render.js", "turns.js", "inspect.css"]


@pytest.fixture(scope="module")
def keyed(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    db = tmp_path_factory.mktemp("inspect-keyed") / "omni.db"
    srv = keyed_server(tiny_engine, db, {"alice": KEY_A, "bob": KEY_B, "ops": KEY_OPS}, ("ops",))
    yield srv
    srv.stop()


def sdk(srv: ServerThread, key: str) -> OpenAI:
    return OpenAI(
        base_url=f"{srv.base_url}/v1", api_key=key, max_retries=0, _strict_response_validation=True
    )


def test_pages_and_their_files_are_served_with_a_strict_policy(http: httpx.Client) -> None:
    for path in PAGES:
        page = http.get(path, headers={"authorization": ""})
        assert page.status_code == 200, path
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "<script" in page.text
    for name in STATIC:
        got = http.get(f"/inspect/static/{name}")
        assert got.status_code == 200, name
        assert got.headers["x-content-type-options"] == "nosniff"
    assert http.get("/inspect/static/inspector.py").status_code == 404
    assert http.get("/inspect/static/..%2Finspector.py").status_code == 404
    assert http.get("/inspect/static/missing.js").status_code == 404


def test_the_json_is_the_log_read_by_the_inspector(
    server: ServerThread, client: OpenAI, http: httpx.Client
) -> None:
    made = client.responses.create(model=MODEL, input="hello", max_output_tokens=12)
    recent = http.get("/inspect/api/recent").json()["data"]
    assert recent[0]["id"] == made.id and recent[0]["kind"] == "response"
    assert recent[0]["status"] == made.status
    detail = http.get(f"/inspect/api/{made.id}")
    assert detail.status_code == 200 and detail.headers["cache-control"] == "no-store"
    assert detail.json()["output_text"] == made.output_text
    rows = http.get(f"/inspect/api/{made.id}/timeline").json()["data"]
    public = [(r["stream_id"], r["seq"], r["type"]) for r in rows if r["stream_id"] == made.id]
    assert public == logged(server.state.store.path, made.id)
    after = http.get(f"/inspect/api/{made.id}/timeline", params={"after_seq": 2}).json()["data"]
    assert [r["seq"] for r in after if r["stream_id"] == made.id] == [s for _, s, _ in public[3:]]
    assert http.get("/inspect/api/resp_missing").status_code == 404
    assert http.get("/inspect/api/resp_missing/timeline").status_code == 404
    assert http.get("/inspect/api/recent", params={"limit": 0}).status_code == 400


def test_a_key_sees_only_its_own(keyed: ServerThread) -> None:
    with sdk(keyed, KEY_A) as alice, sdk(keyed, KEY_B) as bob:
        mine = alice.responses.create(model=MODEL, input="mine", max_output_tokens=4)
        theirs = bob.responses.create(model=MODEL, input="theirs", max_output_tokens=4)
    with httpx.Client(base_url=keyed.base_url, timeout=30) as raw:
        for path in PAGES + ["/inspect/static/object.js"]:
            assert raw.get(path).status_code == 200, path  # no key: the pages hold no data
        for path in ["/inspect/api/recent", f"/inspect/api/{mine.id}"]:
            refused = raw.get(path)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        wrong = raw.get("/inspect/api/recent", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        as_alice = {"authorization": f"Bearer {KEY_A}"}
        ids = [r["id"] for r in raw.get("/inspect/api/recent", headers=as_alice).json()["data"]]
        assert ids == [mine.id]
        assert raw.get(f"/inspect/api/{mine.id}", headers=as_alice).status_code == 200
        for path in [f"/inspect/api/{theirs.id}", f"/inspect/api/{theirs.id}/timeline"]:
            assert raw.get(path, headers=as_alice).status_code == 404, path


def test_the_turns_of_a_chain_per_key(keyed: ServerThread) -> None:
    with sdk(keyed, KEY_A) as alice, sdk(keyed, KEY_B) as bob:
        first = alice.responses.create(model=MODEL, input="one", max_output_tokens=3)
        second = alice.responses.create(
            model=MODEL, input="two", previous_response_id=first.id, max_output_tokens=3
        )
        theirs = bob.responses.create(model=MODEL, input="theirs", max_output_tokens=3)
    as_alice = {"authorization": f"Bearer {KEY_A}"}
    with httpx.Client(base_url=keyed.base_url, timeout=30) as raw:
        got = raw.get(f"/inspect/api/{first.id}/turns", headers=as_alice)
        assert got.status_code == 200 and got.headers["cache-control"] == "no-store"
        body = got.json()
        assert body["object"] == "list" and body["chain"] == "previous_response_id"
        assert [t["id"] for t in body["data"]] == [first.id, second.id]
        assert [t["next"] for t in body["data"]] == [[second.id], []]
        assert [t["previous"] for t in body["data"]] == [None, first.id]
        assert body["data"][1]["input"][0]["text"] == "two"
        assert body["data"][1]["output_text"] == second.output_text
        assert raw.get(f"/inspect/api/{first.id}/turns").status_code == 401
        for path in [f"/inspect/api/{theirs.id}/turns", "/inspect/api/resp_missing/turns"]:
            assert raw.get(path, headers=as_alice).status_code == 404, path
        as_ops = {"authorization": f"Bearer {KEY_OPS}"}  # an admin key sees every key's
        for made, n in ((second, 2), (theirs, 1)):
            seen = raw.get(f"/inspect/api/{made.id}/turns", headers=as_ops).json()["data"]
            assert len(seen) == n


def test_the_list_is_filtered_searched_and_paged(
    server: ServerThread, client: OpenAI, http: httpx.Client
) -> None:
    made = [
        client.responses.create(model=MODEL, input=f"zebrafinch {n}", max_output_tokens=4)
        for n in range(3)
    ]

    def listed(**params: Any) -> dict[str, Any]:
        got = http.get("/inspect/api/recent", params=params)
        assert got.status_code == 200, got.text
        return dict(got.json())

    def ids(**params: Any) -> list[str]:
        return [r["id"] for r in listed(**params)["data"]]

    newest = [m.id for m in reversed(made)]
    assert ids(q="ZEBRAFINCH") == newest  # a word of their input
    assert ids(q="zebrafinch", sort="oldest") == newest[::-1]
    assert ids(q="zebrafinch 1") == [made[1].id]
    assert ids(q="zebrafinch", kind="chat.completion") == []
    assert ids(q="zebrafinch", status=made[0].status, model=MODEL) == newest
    created = {r["id"]: r["created_ms"] for r in listed(q="zebrafinch")["data"]}
    assert ids(q="zebrafinch", since=created[made[2].id]) == [made[2].id]
    assert ids(q="zebrafinch", until="2000-01-01T00:00:00Z") == []
    first = listed(q="zebrafinch", limit=2)
    assert [r["id"] for r in first["data"]] == newest[:2] and first["has_more"]
    rest = listed(q="zebrafinch", limit=2, cursor=first["next_cursor"])
    assert [r["id"] for r in rest["data"]] == newest[2:] and not rest["has_more"]
    assert rest["next_cursor"] is None


@pytest.mark.parametrize(
    ("param", "value", "says"),
    [
        ("kind", "chat", "'kind' must be one of response, chat.completion"),
        ("status", "done", "'status' must be one of queued"),
        ("sort", "random", "'sort' must be one of newest, oldest, duration, tokens"),
        ("since", "yesterday", "'since' must be an ISO 8601 time"),
        ("until", "2026-13-45", "'until' must be an ISO 8601 time"),
        ("cursor", "bm90IGEgY3Vyc29y", "'cursor' is not a cursor this list gave"),
    ],
)
def test_a_value_the_list_cannot_take_is_a_400(
    http: httpx.Client, param: str, value: str, says: str
) -> None:
    refused = http.get("/inspect/api/recent", params={param: value})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"].startswith(says)


def test_a_key_filters_by_owner_within_its_own(keyed: ServerThread) -> None:
    with sdk(keyed, KEY_A) as alice:
        mine = alice.responses.create(model=MODEL, input="kingfisher", max_output_tokens=4)
    as_alice = {"authorization": f"Bearer {KEY_A}"}
    with httpx.Client(base_url=keyed.base_url, timeout=30, headers=as_alice) as raw:
        found = raw.get("/inspect/api/recent", params={"q": "kingfisher", "owner": "alice"})
        assert [(r["id"], r["owner"]) for r in found.json()["data"]] == [(mine.id, "alice")]
        for owner in ("bob", "nobody"):  # another key's objects stay hidden, asked for or not
            got = raw.get("/inspect/api/recent", params={"owner": owner}).json()
            assert got["data"] == [] and got["has_more"] is False
        as_ops = {"authorization": f"Bearer {KEY_OPS}"}  # who sees every key's: chooses one
        chosen = raw.get("/inspect/api/recent", params={"owner": "alice"}, headers=as_ops)
        assert {r["owner"] for r in chosen.json()["data"]} == {"alice"}


def test_an_admin_key_sees_every_keys_rows_with_their_owner(keyed: ServerThread) -> None:
    with sdk(keyed, KEY_A) as alice, sdk(keyed, KEY_B) as bob:
        mine = alice.responses.create(model=MODEL, input="alice's", max_output_tokens=4)
        theirs = bob.responses.create(model=MODEL, input="bob's", max_output_tokens=4)
    with httpx.Client(base_url=keyed.base_url, timeout=30) as raw:
        as_ops = {"authorization": f"Bearer {KEY_OPS}"}
        as_bob = {"authorization": f"Bearer {KEY_B}"}
        assert raw.get("/inspect/api/whoami", headers=as_ops).json() == {
            "owner": "ops", "admin": True}  # fmt: skip
        assert raw.get("/inspect/api/whoami", headers=as_bob).json() == {
            "owner": "bob", "admin": False}  # fmt: skip
        rows = raw.get("/inspect/api/recent", headers=as_ops).json()["data"]
        owners = {r["id"]: r["owner"] for r in rows}
        assert owners[mine.id] == "alice" and owners[theirs.id] == "bob"
        for made in (mine, theirs):
            assert raw.get(f"/inspect/api/{made.id}", headers=as_ops).status_code == 200
            assert raw.get(f"/inspect/api/{made.id}/timeline", headers=as_ops).status_code == 200
        # Bob still sees only his own.
        bobs = [r["id"] for r in raw.get("/inspect/api/recent", headers=as_bob).json()["data"]]
        assert theirs.id in bobs and mine.id not in bobs
        assert raw.get(f"/inspect/api/{mine.id}", headers=as_bob).status_code == 404


def test_the_host_check_guards_the_pages_too(http: httpx.Client) -> None:
    for path in ["/inspect", "/inspect/static/list.js", "/inspect/api/recent"]:
        refused = http.get(path, headers={"host": "evil.example"})
        assert refused.status_code == 403, path
        assert refused.json()["error"]["code"] == "host_not_allowed"
