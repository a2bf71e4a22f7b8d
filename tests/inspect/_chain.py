"""A four-turn `previous_response_id` chain through a real server and its log, written by a
scripted engine (the tiny model's tokenizer, given texts): a tool call, its result, a long
input, a JSON answer. Read by the inspector's service, HTTP, CLI and browser tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openai import OpenAI

from tests.api._helpers import MODEL
from tests.api.test_tool_calls_scripted import CALL_TEXT, WEATHER, ScriptedEngine

# A long input: more than a line of any summary; its end must still be shown.
LONG = " ".join(f"word{i}" for i in range(120)) + " THE-END-OF-THE-LONG-INPUT"
SCHEMA = {
    "type": "json_schema",
    "name": "verdict",
    "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
}
SCRIPTS = [CALL_TEXT, "It is sunny in Paris.", "Noted, all of it.", '{"ok": true}']


@dataclass(frozen=True)
class Chain:
    ids: list[str]  # the turns, first first
    call_id: str  # the tool call of the first turn, answered by the second


def make_chain(engine: ScriptedEngine, client: OpenAI) -> Chain:
    """Four responses, each the previous one's next turn."""
    engine.scripts += SCRIPTS
    first = client.responses.create(
        model=MODEL, input="Weather in Paris?", tools=[WEATHER], tool_choice="auto",
        instructions="Answer with tools.", temperature=0.3, metadata={"case": "chain"},
    )  # fmt: skip
    call = first.output[0]
    assert call.type == "function_call"
    result: Any = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=[result], tools=[WEATHER]
    )
    third = client.responses.create(model=MODEL, previous_response_id=second.id, input=LONG)
    fourth = client.responses.create(
        model=MODEL, previous_response_id=third.id, input="Was it fine?",
        text={"format": SCHEMA},  # type: ignore[typeddict-item]
    )  # fmt: skip
    return Chain([first.id, second.id, third.id, fourth.id], call.call_id)
