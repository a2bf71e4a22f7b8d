"""omni.inspect.inputs: every API's input shapes read whole, each part in order (pure)."""

from __future__ import annotations

from omni.inspect import inputs
from omni.inspect.requests import request_summary

PNG = "data:image/png;base64,iVBORw0KGgo="


def test_a_responses_message_keeps_its_images_and_its_whole_text() -> None:
    long = "x" * 500
    shown = inputs.response_item(
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": long},
                {"type": "input_image", "image_url": PNG, "detail": "low"},
                {"type": "input_image", "image_url": "https://example.com/cat.png"},
            ],
        }  # fmt: skip
    )
    assert shown["parts"] == [
        {"type": "text", "text": long},
        {"type": "image", "url": PNG, "detail": "low"},
        {"type": "image", "url": "https://example.com/cat.png"},
    ]
    # The summary's text names a remote image by its URL, never inlines a data: one.
    assert shown["text"] == f"{long} [image] [image https://example.com/cat.png]"


def test_sealed_items_say_what_they_are() -> None:
    for type_ in ("compaction", "compaction_trigger"):
        [part] = inputs.response_item({"type": type_, "encrypted_content": "x"})["parts"]
        assert part["type"] == "note" and part["text"] == inputs.SEALED[type_]
    unknown = inputs.response_item({"type": "mcp_call", "name": "n"})
    assert unknown["parts"] == [{"type": "text", "text": '{"type": "mcp_call", "name": "n"}'}]


def test_chat_messages_with_calls_and_results() -> None:
    body = {"model": "m", "messages": [
        {"role": "system", "content": "Be terse."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG}}]},
    ], "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "seed": 7,
        "tool_choice": "required", "response_format": {"type": "json_object"}}  # fmt: skip
    summary = request_summary("chat.completion", {"body": body})
    assert [i["role"] for i in summary["input"]] == ["system", "assistant", "tool", "user"]
    assert summary["input"][1]["parts"] == [
        {"type": "tool_call", "name": "f", "arguments": '{"a": 1}', "call_id": "call_1"}
    ]
    assert summary["input"][2]["parts"] == [
        {"type": "tool_result", "text": "42", "call_id": "call_1", "is_error": False}
    ]
    assert summary["input"][3]["parts"] == [{"type": "image", "url": PNG}]
    assert summary["tools"] == body["tools"] and summary["tool_choice"] == "required"
    assert summary["response_format"] == {"type": "json_object"}
    assert summary["sampling"] == {"seed": 7}


def test_an_anthropic_inline_image_is_a_data_url_and_a_failed_result_says_so() -> None:
    message = {"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}},
        {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
         "content": [{"type": "text", "text": "no such city"}]},
    ]}  # fmt: skip
    shown = inputs.anthropic_message(message)
    assert shown["parts"][0] == {"type": "image", "url": PNG}
    assert shown["parts"][1]["is_error"] is True
    assert shown["text"] == "[image] error: no such city"
