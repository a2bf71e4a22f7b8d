"""omni.inspect.turns and the whole request on a real server's log: a four-turn chain with a
tool call (tests/inspect/_chain.py), a fork of it, a conversation's turns."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from omni.inspect import Inspector, open_log
from omni.inspect.turns import turns
from tests.api._helpers import MODEL
from tests.api.test_tool_calls_scripted import WEATHER, ScriptedEngine
from tests.inspect._chain import LONG, SCHEMA, Chain, make_chain
from tests.server import serving


@dataclass(frozen=True)
class Made:
    db: Path
    chain: Chain
    fork: str  # a second turn after the chain's third
    conversation: str
    in_conversation: list[str]  # its responses' turns, in order
    chat: str


@pytest.fixture(scope="module")
def made(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Made]:
    db = tmp_path_factory.mktemp("turns") / "omni.db"
    engine = ScriptedEngine(tiny_engine)
    with serving(engine, db) as client:
        client: OpenAI
        chain = make_chain(engine, client)
        engine.scripts += ["Another way.", "One.", "Two.", "Hi."]
        fork = client.responses.create(
            model=MODEL, previous_response_id=chain.ids[2], input="Or else?"
        )
        conv = client.conversations.create(metadata={"topic": "counting"})
        said = [
            client.responses.create(model=MODEL, conversation=conv.id, input=f"Count {n}").id
            for n in (1, 2)
        ]
        chat = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], store=True
        )
    yield Made(db, chain, fork.id, conv.id, said, chat.id)


@pytest.fixture
def ins(made: Made) -> Iterator[Inspector]:
    engine = open_log(str(made.db))
    with engine.connect() as conn:
        yield Inspector(conn)
    engine.dispose()


def test_every_turn_of_a_chain_in_order_linked_both_ways(made: Made, ins: Inspector) -> None:
    ids = made.chain.ids
    for asked in ids:  # the same chain from any of its turns
        found = turns(ins, asked)
        assert found is not None and found.chain == "previous_response_id"
        assert [t.id for t in found.turns] == ids
    found = turns(ins, ids[1])
    assert found is not None
    shown = found.turns
    assert [t.previous for t in shown] == [None, *ids[:3]]
    assert [t.next for t in shown] == [[ids[1]], [ids[2]], [ids[3], made.fork], []]
    call = shown[0].tool_calls[0]
    assert call["name"] == "get_weather" and call["call_id"] == made.chain.call_id
    assert shown[1].input[0]["parts"] == [
        {"type": "tool_result", "text": "sunny, 21 C", "call_id": made.chain.call_id,
         "is_error": False},
    ]  # fmt: skip
    assert shown[1].output_text == "It is sunny in Paris."
    assert shown[2].input[0]["text"] == LONG  # whole
    assert shown[3].output_text == '{"ok": true}'
    as_json = found.to_json()
    assert as_json["object"] == "list" and len(as_json["data"]) == 4
    assert as_json["data"][2]["input"][0]["parts"] == [{"type": "text", "text": LONG}]


def test_a_fork_is_its_own_chain_from_where_it_left(made: Made, ins: Inspector) -> None:
    found = turns(ins, made.fork)
    assert found is not None
    assert [t.id for t in found.turns] == [*made.chain.ids[:3], made.fork]


def test_the_whole_request_of_a_turn(made: Made, ins: Inspector) -> None:
    first = ins.detail(made.chain.ids[0])
    assert first is not None
    request = first.request
    assert request["tools"][0]["name"] == "get_weather"
    assert request["tools"][0]["parameters"] == WEATHER["parameters"]  # the schema, whole
    assert request["tool_choice"] == "auto"
    assert request["instructions"] == "Answer with tools."
    assert request["sampling"]["temperature"] == 0.3 and "max_tokens" in request["sampling"]
    assert request["metadata"] == {"case": "chain"}
    last = ins.detail(made.chain.ids[3])
    assert last is not None and last.request["response_format"] == SCHEMA


def test_a_conversations_turns(made: Made, ins: Inspector) -> None:
    for asked in (made.conversation, made.in_conversation[1]):
        found = turns(ins, asked)
        assert found is not None and found.chain == "conversation"
        assert found.conversation == made.conversation
        assert [t.id for t in found.turns] == made.in_conversation
        assert [t.previous for t in found.turns] == [None, made.in_conversation[0]]
        assert [t.next for t in found.turns] == [[made.in_conversation[1]], []]
    detail = ins.detail(made.in_conversation[0])
    assert detail is not None and detail.conversation == made.conversation


def test_one_that_stands_alone_and_one_not_found(made: Made, ins: Inspector) -> None:
    alone = turns(ins, made.chat)
    assert alone is not None and alone.chain == "none"
    assert [t.id for t in alone.turns] == [made.chat]
    assert turns(ins, "resp_missing") is None
    assert turns(ins, made.chain.ids[0], owner="bob") is None  # another key's
