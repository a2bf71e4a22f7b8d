"""Compaction at the service level: `responses.compact`, a create ending in
`compaction_trigger` (Codex's remote compaction) and `context_management`. The model writes a
summary (a response of its own on the log); the compaction item seals the window that replaces
the conversation; a prompt renders the latest compaction item as that window."""

from __future__ import annotations

import json
from typing import Any

import pytest

from omni.errors import InvalidRequest
from omni.inspect.requests import request_summary
from omni.ports.jobs import Delta, Finished
from omni.schemas.responses import ResponseCreate
from omni.service.compaction import SUMMARY_HEADER, SUMMARY_PROMPT, sealed_window, window
from omni.service.compactor import SUMMARY_METADATA

from .conftest import Services

FACT = "The deploy code is 7391."
SUMMARY = "We talked about the deploy code, 7391, and the weather."


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def said(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


SESSION = [
    {"type": "message", "role": "developer", "content": "Be brief."},
    user(FACT),
    said("Noted, with a long answer about codes that the summary replaces."),
    user("What is the weather like?"),
    said("Sunny."),
]


def script(services: Services, *texts: str) -> None:
    for text in texts:
        services.engine.scripts.append([Delta(text, 5), Finished("stop", 3, 1)])


def texts(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content")) for m in messages)


async def test_compact_seals_a_summary_the_model_wrote_and_a_prompt_reads_it(
    services: Services,
) -> None:
    responses = services.responses
    script(services, SUMMARY)
    compacted = await responses.compactor.compact(
        ResponseCreate(input=SESSION, instructions="You help."), None
    )
    assert compacted["object"] == "response.compaction"
    [item] = compacted["output"]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    assert SUMMARY not in item["encrypted_content"]  # sealed
    # The summary is a response on the log: the session, then Omni's prompt, read by the model.
    summary = await responses.retrieve(compacted["id"])
    assert summary["metadata"] == SUMMARY_METADATA and summary["tool_choice"] == "none"
    asked = services.engine.rendered[-1]
    assert asked[-1] == {"role": "user", "content": SUMMARY_PROMPT}
    assert "Noted" in texts(asked) and asked[0]["content"].startswith("You help.")
    assert compacted["usage"] == summary["usage"]

    # The next turn sends the compaction item back: its prompt is the window (the summary, the
    # user's messages, the last turn's answer), not the session.
    script(services, "7391")
    rid = (await responses.create(ResponseCreate(input=[item, user("Which code?")])))["id"]
    assert (await responses.wait(rid))["status"] == "completed"
    prompt = services.engine.rendered[-1]
    assert prompt[0]["role"] == "system" and SUMMARY_HEADER + SUMMARY in prompt[0]["content"]
    assert "Be brief." not in prompt[0]["content"]  # instructions are the client's to send
    assert [m["content"] for m in prompt[1:]] == [
        FACT,
        "What is the weather like?",
        "Sunny.",
        "Which code?",
    ]


async def test_a_compaction_item_altered_or_sealed_for_reasoning_is_refused(
    services: Services,
) -> None:
    responses = services.responses
    script(services, SUMMARY)
    [item] = (await responses.compactor.compact(ResponseCreate(input=SESSION), None))["output"]
    token = item["encrypted_content"]
    altered = token[:-6] + ("AAAA==" if not token.endswith("AAAA==") else "BBBB==")
    reasoning = responses.sealer.seal([{"type": "reasoning_text", "text": "x"}])
    for bad in (altered, reasoning):
        with pytest.raises(InvalidRequest) as refused:
            await responses.create(
                ResponseCreate(input=[{**item, "encrypted_content": bad}, user("go on")])
            )
        assert refused.value.param == "input[0].encrypted_content"
    assert len(services.engine.jobs) == 1  # the summary alone ran


async def test_a_create_ending_in_compaction_trigger_is_the_compaction(
    services: Services,
) -> None:
    """Codex's remote compaction: one output item, the compaction of what came before the
    trigger, in a response complete from its first events; only the summary generated."""
    responses = services.responses
    script(services, SUMMARY)
    body = ResponseCreate(input=[*SESSION, {"type": "compaction_trigger"}], stream=True)
    response = await responses.create(body)
    final = await responses.wait(response["id"])
    assert final["status"] == "completed"
    [item] = final["output"]
    assert item["type"] == "compaction"
    assert final["usage"]["output_tokens"] == 1  # the summary's
    assert len(services.engine.jobs) == 1
    events = await services.store.read(response["id"])
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    # Its item opens as the window: the facts the session's user said, and the summary.
    script(services, "ok")
    rid = (await responses.create(ResponseCreate(input=[item, user("Which code?")])))["id"]
    await responses.wait(rid)
    assert FACT in texts(services.engine.rendered[-1])


async def test_a_compaction_trigger_before_the_last_item_is_refused(services: Services) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await services.responses.create(
            ResponseCreate(input=[user("a"), {"type": "compaction_trigger"}, user("b")])
        )
    assert refused.value.param == "input[1]"


async def test_context_management_compacts_past_its_threshold_and_goes_on(
    services: Services,
) -> None:
    responses = services.responses
    script(services, SUMMARY, "It is 7391.")
    body = ResponseCreate(
        input=[*SESSION, user("Which code?")],
        context_management=[{"type": "compaction", "compact_threshold": 2}],
    )
    rid = (await responses.create(body))["id"]
    final = await responses.wait(rid)
    assert [i["type"] for i in final["output"]] == ["compaction", "message"]
    prompt = services.engine.rendered[-1]
    assert SUMMARY in prompt[0]["content"] and "Noted" not in texts(prompt)
    assert "Sunny" not in texts(prompt)  # before the last user message: summarised
    assert prompt[-1] == {"role": "user", "content": "Which code?"}  # the turn's own, last

    # The chain goes on from the compaction: what came before it is not read again.
    script(services, "Yes.")
    chained = ResponseCreate(input="Sure?", previous_response_id=rid)
    await responses.wait((await responses.create(chained))["id"])
    prompt = services.engine.rendered[-1]
    assert "Noted" not in texts(prompt) and prompt[-2:] == [
        {"role": "assistant", "content": "It is 7391."},
        {"role": "user", "content": "Sure?"},
    ]


async def test_context_management_below_its_threshold_generates_as_usual(
    services: Services,
) -> None:
    responses = services.responses
    script(services, "Sunny.")
    body = ResponseCreate(
        input=SESSION, context_management=[{"type": "compaction", "compact_threshold": 10_000}]
    )
    final = await responses.wait((await responses.create(body))["id"])
    assert [i["type"] for i in final["output"]] == ["message"]
    assert len(services.engine.jobs) == 1


async def test_compact_covers_a_chain(services: Services) -> None:
    responses = services.responses
    script(services, "Noted, with thanks.", SUMMARY)
    first = (await responses.create(ResponseCreate(input=FACT)))["id"]
    await responses.wait(first)
    await responses.compactor.compact(
        ResponseCreate(input="compact now", previous_response_id=first), None
    )
    asked = texts(services.engine.rendered[-1])
    assert FACT in asked and "Noted, with" in asked and "compact now" in asked


def test_a_window_keeps_the_latest_users_within_budget_and_the_turn_after_them() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"}
    result = {"type": "function_call_output", "call_id": "c1", "output": "42"}
    conversation = [user("a" * 50), said("x"), user("b" * 50), user("c" * 10), call, result]
    sealed = sealed_window(conversation, SUMMARY, budget=70)
    assert sealed[0]["role"] == "developer" and SUMMARY in json.dumps(sealed[0])
    assert sealed[1:] == [conversation[2], conversation[3], call, result]
    # The last user message is kept whatever its size.
    assert sealed_window(conversation, SUMMARY, budget=1)[1:] == [conversation[3], call, result]


def test_a_window_opens_the_latest_compaction_and_keeps_instructions_before_it() -> None:
    developer = {"type": "message", "role": "developer", "content": "Be brief."}
    old = {"type": "compaction", "encrypted_content": "old"}
    new = {"type": "compaction", "encrypted_content": "new"}
    opened = [user("kept")]
    history = [developer, user("gone"), old, said("gone too"), new, said("after")]
    earlier, own = window(history, [user("now")], lambda token: opened if token == "new" else [])
    assert earlier == [developer, *opened, said("after")] and own == [user("now")]
    earlier, own = window([user("gone")], [new, user("now")], lambda token: opened)
    assert earlier == [] and own == [*opened, user("now")]


async def test_the_inspector_says_what_a_sealed_item_is(services: Services) -> None:
    """A compaction item, or the trigger, has no text: the request's summary says what it is."""
    script(services, SUMMARY)
    body = ResponseCreate(input=[*SESSION, {"type": "compaction_trigger"}])
    response = await services.responses.create(body)
    request, _ = await services.responses.accepted(response["id"])
    lines = request_summary("response", request)["input"]
    assert lines[-1]["type"] == "compaction_trigger" and lines[-1]["role"] is None
    assert lines[-1]["text"].startswith("[compact:")
    [item] = (await services.responses.wait(response["id"]))["output"]
    request["input"] = [item]
    [line] = request_summary("response", request)["input"]
    assert line["type"] == "compaction" and "sealed" in line["text"]
