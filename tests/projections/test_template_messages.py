"""to_chat_messages: stored items → chat-template messages."""

from __future__ import annotations

import json

from omni.projections.template_messages import to_chat_messages


def msg(role: str, *texts: str, kind: str | None = None) -> dict:  # type: ignore[type-arg]
    kind = kind or ("output_text" if role == "assistant" else "input_text")
    return {
        "id": f"msg_{role}",
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [{"type": kind, "text": t} for t in texts],
    }


CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
    "status": "completed",
}
OUTPUT = {
    "id": "fco_1",
    "type": "function_call_output",
    "call_id": "call_1",
    "output": '{"temperature": 21}',
    "status": "completed",
}


def test_plain_user_message() -> None:
    assert to_chat_messages(None, [msg("user", "hi")], False) == [{"role": "user", "content": "hi"}]


def test_instructions_alone_become_a_leading_system_message() -> None:
    assert to_chat_messages("Be brief.", [msg("user", "hi")], False) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_system_developer_and_instructions_merge_in_order() -> None:
    items = [
        msg("user", "u1"),
        msg("system", "sys A"),
        msg("assistant", "a1"),
        msg("developer", "dev B"),
        msg("user", "u2"),
    ]
    out = to_chat_messages("instr", items, False)
    assert out == [
        {"role": "system", "content": "instr\n\nsys A\n\ndev B"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
    ]
    assert sum(1 for m in out if m["role"] == "system") == 1


def test_system_without_instructions() -> None:
    out = to_chat_messages(None, [msg("developer", "dev"), msg("user", "u")], False)
    assert out == [{"role": "system", "content": "dev"}, {"role": "user", "content": "u"}]


def test_empty_instructions_add_nothing() -> None:
    assert to_chat_messages("", [msg("user", "u")], False) == [{"role": "user", "content": "u"}]


def test_multi_part_and_refusal_content() -> None:
    refusal = {
        "id": "msg_r",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": "I can't."}],
    }
    out = to_chat_messages(None, [msg("user", "one", "two"), refusal], False)
    assert out == [
        {"role": "user", "content": "one\ntwo"},
        {"role": "assistant", "content": "I can't."},
    ]


def test_reasoning_items_are_skipped() -> None:
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": []}
    out = to_chat_messages(None, [msg("user", "u"), reasoning, msg("assistant", "a")], False)
    assert out == [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]


def test_function_call_and_output_structured() -> None:
    out = to_chat_messages(None, [msg("user", "weather?"), CALL, OUTPUT], True)
    assert out == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]


def test_function_call_and_output_as_text() -> None:
    out = to_chat_messages(None, [msg("user", "weather?"), CALL, OUTPUT], False)
    assert out[0] == {"role": "user", "content": "weather?"}
    assert out[1]["role"] == "assistant"
    assert json.loads(out[1]["content"]) == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert "tool_calls" not in out[1]
    assert out[2] == {"role": "user", "content": 'Result of get_weather: {"temperature": 21}'}
    assert all(m["role"] in ("user", "assistant") for m in out)


def test_function_call_with_non_json_arguments_is_kept_as_text() -> None:
    call = {**CALL, "arguments": "not json"}
    out = to_chat_messages(None, [call], True)
    assert out[0]["tool_calls"][0]["function"]["arguments"] == "not json"


def test_function_output_as_parts() -> None:
    output = {
        **OUTPUT,
        "output": [
            {"type": "input_text", "text": "part 1"},
            {"type": "input_text", "text": "part 2"},
        ],
    }
    structured = to_chat_messages(None, [CALL, output], True)
    assert structured[1] == {"role": "tool", "tool_call_id": "call_1", "content": "part 1\npart 2"}
    text = to_chat_messages(None, [CALL, output], False)
    assert text[1] == {"role": "user", "content": "Result of get_weather: part 1\npart 2"}


def test_output_without_a_known_call_names_the_call_id() -> None:
    out = to_chat_messages(None, [OUTPUT], False)
    assert out == [{"role": "user", "content": 'Result of call_1: {"temperature": 21}'}]
