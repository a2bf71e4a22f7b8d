"""A Messages request's `role: "system"` messages (the beta API's instructions inside the
conversation, as Claude Code sends them) run as chat system messages. Pure: as_chat."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from omni.schemas.messages import MessageCreate
from omni.service.message_input import as_chat


def _create(messages: list[dict[str, Any]], **fields: Any) -> MessageCreate:
    return MessageCreate.model_validate(
        {"model": "m", "max_tokens": 8, "messages": messages, **fields}
    )


def test_a_system_message_after_the_users_is_instructions() -> None:
    body = _create(
        [{"role": "user", "content": "hi"}, {"role": "system", "content": "Be brief."}],
        system="You help.",
    )
    chat = as_chat(body)
    assert [(m.role, m.content) for m in chat.messages] == [
        ("system", "You help."),
        ("user", "hi"),
        ("system", "Be brief."),
    ]


def test_a_system_message_cleared_at_the_next_user_message_is_gone_once_it_comes() -> None:
    shown = {"role": "system", "content": [{"type": "text", "text": "now"}]}
    once = {**shown, "clear_at": "next_user_message"}
    body = _create(
        [
            {"role": "user", "content": "a"},
            once,
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
            shown,
        ]
    )
    said = [(m.role, m.content) for m in as_chat(body).messages]
    assert said == [("user", "a"), ("assistant", "b"), ("user", "c"), ("system", "now")]


def test_a_system_message_holds_text_only_and_the_last_word_is_still_the_users() -> None:
    addition = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "x"}}
    with pytest.raises(ValidationError, match="tool_addition"):
        _create([{"role": "user", "content": "a"}, {"role": "system", "content": [addition]}])
    with pytest.raises(ValidationError, match="prefill"):
        _create(
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "system", "content": "c"},
            ]
        )


def test_xhigh_effort_thinks_as_high() -> None:
    body = _create([{"role": "user", "content": "a"}], output_config={"effort": "xhigh"})
    assert as_chat(body).reasoning_effort == "high"
