"""Concurrent writers of one object's facts, through the real server and the async SDK: every
metadata update lands, a delete happens once (the others are 404, as a second delete is),
and no answer carries a driver's text."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from openai import AsyncOpenAI, NotFoundError, OpenAI

from tests.api._helpers import MODEL, read_log

UPDATES = 30
DELETES = 10


def gather(server: Any, calls: Callable[[AsyncOpenAI], list[Awaitable[Any]]]) -> list[Any]:
    """Run the calls at once on one async client; their results or exceptions, in order."""

    async def main() -> list[Any]:
        async with AsyncOpenAI(
            base_url=f"{server.base_url}/v1", api_key="test", max_retries=0
        ) as client:
            return await asyncio.gather(*calls(client), return_exceptions=True)

    return asyncio.run(main())


def stored_chat(client: OpenAI, text: str) -> str:
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=2, store=True
    ).id


def assert_only_404s(results: list[Any]) -> None:
    """The losers are 404s whose message names the object, never a driver or a conflict."""
    for result in results:
        assert isinstance(result, NotFoundError), repr(result)
        assert result.status_code == 404
        message = result.body["message"]  # type: ignore[index]
        assert "No " in message and "sqlite" not in message.lower(), message
        assert "UNIQUE" not in message and "conflict" not in message.lower(), message


def test_concurrent_metadata_updates_all_land(client: OpenAI, server: Any) -> None:
    cid = stored_chat(client, "update me")
    results = gather(
        server,
        lambda c: [c.chat.completions.update(cid, metadata={"n": str(i)}) for i in range(UPDATES)],
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert failures == []
    assert sorted(r.metadata["n"] for r in results) == sorted(str(i) for i in range(UPDATES))
    facts = read_log(server, f"{cid}/request")
    assert [e.type for e in facts] == [
        "omni.request.accepted",
        *["omni.completion.metadata_updated"] * UPDATES,
    ]
    assert [e.seq for e in facts] == list(range(UPDATES + 1))
    # The completion carries the update that landed last, one of the thirty.
    last = facts[-1].data
    assert client.chat.completions.retrieve(cid).metadata == {"n": last.split('"')[-2]}


def test_concurrent_deletes_of_a_response_delete_it_once(client: OpenAI, server: Any) -> None:
    rid = client.responses.create(model=MODEL, input="delete me", max_output_tokens=2).id
    results = gather(server, lambda c: [c.responses.delete(rid) for _ in range(DELETES)])
    assert results.count(None) == 1  # the SDK's delete returns None on a 200
    assert_only_404s([r for r in results if r is not None])
    facts = [e.type for e in read_log(server, f"{rid}/request")]
    assert facts == ["omni.request.accepted", "omni.response.deleted"]


def test_concurrent_deletes_of_a_chat_completion_delete_it_once(
    client: OpenAI, server: Any
) -> None:
    cid = stored_chat(client, "delete me")
    results = gather(server, lambda c: [c.chat.completions.delete(cid) for _ in range(DELETES)])
    deleted = [r for r in results if not isinstance(r, BaseException)]
    assert [r.deleted for r in deleted] == [True]
    assert_only_404s([r for r in results if isinstance(r, BaseException)])
    facts = [e.type for e in read_log(server, f"{cid}/request")]
    assert facts == ["omni.request.accepted", "omni.completion.deleted"]


def test_updates_racing_a_delete_land_before_it_or_are_404(client: OpenAI, server: Any) -> None:
    cid = stored_chat(client, "update, then delete")
    results = gather(
        server,
        lambda c: [
            *[c.chat.completions.update(cid, metadata={"n": str(i)}) for i in range(5)],
            c.chat.completions.delete(cid),
            *[c.chat.completions.update(cid, metadata={"n": str(i)}) for i in range(5, 10)],
        ],
    )
    assert_only_404s([r for r in results if isinstance(r, BaseException)])
    facts = [e.type for e in read_log(server, f"{cid}/request")]
    landed = sum(not isinstance(r, BaseException) for r in results) - 1  # less the delete
    assert facts == [
        "omni.request.accepted",
        *["omni.completion.metadata_updated"] * landed,
        "omni.completion.deleted",  # last: nothing lands on a deleted completion
    ]


def test_a_cancel_racing_a_delete_writes_one_tombstone_last(client: OpenAI, server: Any) -> None:
    rid = client.responses.create(
        model=MODEL, input="go on", max_output_tokens=2, background=True
    ).id
    results = gather(
        server,
        lambda c: [*[c.responses.cancel(rid) for _ in range(3)], c.responses.delete(rid)],
    )
    assert_only_404s([r for r in results if isinstance(r, BaseException)])
    facts = [e.type for e in read_log(server, f"{rid}/request")]
    assert facts.count("omni.response.deleted") == 1
    assert facts[-1] == "omni.response.deleted"  # no cancel request after the tombstone
