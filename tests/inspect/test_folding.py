"""omni.inspect.folding: what each kind of object said, refusals included (pure)."""

from __future__ import annotations

from omni.inspect.folding import completion_output, message_output, response_output


def test_a_responses_refusal_is_apart_from_its_text() -> None:
    said = response_output({"output": [
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Hm."}]},
        {"type": "message", "content": [
            {"type": "output_text", "text": "I can say this."},
            {"type": "refusal", "refusal": "Not that."},
        ]},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "call_1"},
    ]})  # fmt: skip
    assert said.text == "I can say this." and said.refusal == "Not that."
    assert said.reasoning == "Hm."
    assert said.tool_calls == [{"name": "f", "arguments": "{}", "call_id": "call_1"}]


def test_a_chat_completions_refusal_and_calls() -> None:
    calls = [{"id": "c", "function": {"name": "g", "arguments": "{}"}}]
    message = {
        "content": None,
        "refusal": "No.",
        "reasoning_content": "Why not.",
        "tool_calls": calls,
    }
    said = completion_output("chat.completion", {"choices": [{"message": message}]})
    assert (said.text, said.refusal, said.reasoning) == ("", "No.", "Why not.")
    assert said.tool_calls == [{"name": "g", "arguments": "{}", "call_id": "c"}]


def test_a_messages_blocks_in_order() -> None:
    said = message_output({"content": [
        {"type": "thinking", "thinking": "Hm."},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Paris"}},
    ]})  # fmt: skip
    assert (said.text, said.reasoning, said.refusal) == ("Let me check.", "Hm.", "")
    assert said.tool_calls == [
        {"name": "w", "arguments": '{"city": "Paris"}', "call_id": "toolu_1"}
    ]
