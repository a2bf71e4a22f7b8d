"""Which tools a request may call and the grammar its output must follow, told from how the
model writes calls (a ToolFormat): pure, no engine and no tokenizer."""

from __future__ import annotations

from typing import Any

import pytest

from omni.errors import InvalidRequest
from omni.ports.chat import ToolFormat
from omni.tools.policy import splitter, tool_policy
from omni.tools.schema import decoding_constraint

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "strict": True,
    "parameters": {**CITY, "additionalProperties": False},
}
PLAIN = ToolFormat()  # plain JSON calls
HERMES = ToolFormat("<tool_call>", "</tool_call>", lambda text, tools: None, "json_tools")
CODER = ToolFormat("<tool_call>", "</tool_call>", lambda text, tools: None, "qwen3_coder")


def test_the_policy_reads_each_tool_choice() -> None:
    tools, mode = tool_policy([WEATHER], None)
    assert mode == "auto" and tools[0]["function"]["name"] == "get_weather"
    assert tool_policy([], None) == ([], "none")
    assert tool_policy([WEATHER], {"type": "function", "name": "get_weather"})[1] == "required"
    allowed = {"type": "allowed_tools", "mode": "required", "tools": [{"name": "get_weather"}]}
    assert tool_policy([WEATHER], allowed)[1] == "required"
    with pytest.raises(InvalidRequest, match="not in `tools`"):
        tool_policy([WEATHER], {"type": "function", "name": "nope"})
    with pytest.raises(InvalidRequest, match="needs at least one function tool"):
        tool_policy([], "required")


def test_a_splitter_only_where_a_call_may_be_made() -> None:
    tools, _ = tool_policy([WEATHER], None)
    assert splitter(PLAIN, tools, "none") is None
    assert splitter(PLAIN, [], "auto") is None
    assert splitter(HERMES, tools, "auto") is not None


@pytest.mark.parametrize(
    ("fmt", "kind"),
    [(PLAIN, "json_schema"), (HERMES, "native_call"), (CODER, "family_call")],
)
def test_a_required_call_is_forced_in_the_models_own_format(fmt: ToolFormat, kind: str) -> None:
    tools, mode = tool_policy([WEATHER], "required")
    spec = decoding_constraint(fmt, tools, mode, None, "text.format")
    assert spec is not None and spec["type"] == kind


@pytest.mark.parametrize(
    ("fmt", "kind"),
    [(PLAIN, "text_or_call"), (HERMES, "native_call"), (CODER, "family_call")],
)
def test_strict_tools_under_auto_are_checked_in_the_models_own_format(
    fmt: ToolFormat, kind: str
) -> None:
    tools, mode = tool_policy([WEATHER], "auto")
    spec = decoding_constraint(fmt, tools, mode, None, "text.format")
    assert spec is not None and spec["type"] == kind


def test_an_answer_format_without_tools() -> None:
    fmt: dict[str, Any] = {"type": "json_schema", "schema": {"type": "object"}}
    spec = decoding_constraint(PLAIN, [], "none", fmt, "text.format")
    assert spec == {"type": "json_schema", "schema": {"type": "object"}}
    assert decoding_constraint(PLAIN, [], "none", None, "text.format") is None
    with pytest.raises(InvalidRequest, match="Unsupported format type"):
        decoding_constraint(PLAIN, [], "none", {"type": "xml"}, "text.format")
