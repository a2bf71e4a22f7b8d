"""Compaction through the official OpenAI Python SDK with strict types, on the tiny model:
`responses.compact`, its item sent back as input, `context_management` on a create and its
chain, a create ending in `compaction_trigger` streamed, and what HTTP shows of a refusal."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import ResponseCompactionItem, ResponseOutputMessage

from tests.api._helpers import MODEL

SESSION: Any = [
    {"role": "user", "content": "Remember: the deploy code is 7391."},
    {"role": "assistant", "content": "Noted: 7391, and a long reply the summary replaces."},
    {"role": "user", "content": "And the weather is sunny today."},
]
NEXT: Any = {"role": "user", "content": "Which code?"}
SHORT: Any = {"max_output_tokens": 8}  # the summary's cap (Omni's extension), for speed


def test_compact_and_send_the_window_back(client: OpenAI) -> None:
    compacted = client.responses.compact(model=MODEL, input=SESSION, extra_body=SHORT)
    assert compacted.object == "response.compaction"
    [item] = compacted.output
    assert isinstance(item, ResponseCompactionItem) and item.id.startswith("cmp_")
    assert compacted.usage.output_tokens <= 8
    summary = client.responses.retrieve(compacted.id)  # the summary is a response on the log
    assert summary.metadata == {"omni_compaction": "summary"}

    window: Any = [item.model_dump(exclude_none=True), NEXT]
    counted = client.responses.input_tokens.count(model=MODEL, input=window)
    whole = client.responses.input_tokens.count(model=MODEL, input=[*SESSION, NEXT])
    assert counted.input_tokens > 0 and counted.input_tokens != whole.input_tokens
    went_on = client.responses.create(model=MODEL, input=window, max_output_tokens=2)
    assert went_on.status == "incomplete" and went_on.usage is not None
    assert went_on.usage.input_tokens == counted.input_tokens
    listed = client.responses.input_items.list(went_on.id, order="asc").data
    assert [i.type for i in listed] == ["compaction", "message"]


def test_context_management_compacts_and_the_chain_goes_on(client: OpenAI) -> None:
    first = client.responses.create(
        model=MODEL,
        input=[*SESSION, NEXT],
        max_output_tokens=2,
        context_management=[{"type": "compaction", "compact_threshold": 10}],
    )
    assert [type(o) for o in first.output] == [ResponseCompactionItem, ResponseOutputMessage]
    then = client.responses.create(
        model=MODEL, input="Sure?", previous_response_id=first.id, max_output_tokens=2
    )
    # The chain reads from its compaction on, as a client that sends the window back does.
    sent_back: Any = [o.model_dump(exclude_none=True) for o in first.output]
    sent_back.append({"role": "user", "content": "Sure?"})
    stateless = client.responses.input_tokens.count(model=MODEL, input=sent_back)
    assert then.usage is not None and then.usage.input_tokens == stateless.input_tokens


def test_a_streamed_compaction_trigger(client: OpenAI) -> None:
    with client.responses.stream(
        model=MODEL, input=[*SESSION, {"type": "compaction_trigger"}]
    ) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    [item] = final.output
    assert isinstance(item, ResponseCompactionItem)


def test_a_compaction_item_not_ours_is_a_400(client: OpenAI, http: httpx.Client) -> None:
    forged: Any = {"type": "compaction", "encrypted_content": "bm90IG91cnM="}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input=[forged, NEXT], max_output_tokens=2)
    assert refused.value.param == "input[0].encrypted_content"
    r = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": [{"type": "compaction_trigger"}, NEXT]},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[0]"
    r = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": "x", "context_management": [{"type": "other"}]},
    )
    assert r.status_code == 400 and "context_management" in r.json()["error"]["message"]
