"""The grammars that leave the model a choice: free text or a call (strict tools under
tool_choice auto), and a structured answer or a call (tools with a JSON-schema answer).
Checked on the tokenizer level: which complete outputs each grammar accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlx_lm.utils import load_tokenizer

from omni.runtime.chat.constraints import Constraints
from omni.tools.schema import (
    answer_or_call,
    call_constraint,
    native_strict_constraint,
    output_constraint,
    strict_calls_constraint,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]
ANSWER = {
    "type": "json_schema",
    "schema": {
        "type": "object",
        "properties": {"s": {"type": "string", "maxLength": 8}},
        "required": ["s"],
        "additionalProperties": False,
    },
}
CALL = '{"name":"get_weather","arguments":{"city":"Paris"}}'


@pytest.fixture(scope="module")
def constraints(tiny_model_dir: Path) -> Constraints:
    return Constraints(load_tokenizer(tiny_model_dir))


def accepts(constraints: Constraints, spec: dict[str, Any], text: str) -> bool:
    matcher = constraints._compiled(spec).deep_copy()
    tokens = constraints.tokenizer.tokenize_str(text)
    return bool(matcher.consume_tokens(tokens)) and matcher.is_accepting()


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (CALL, True),
        ("It is sunny.", True),
        ('{"name":"get_weather","arguments":{"town":"Paris"}}', False),  # not its parameters
        ('{"s":"hi"}', False),  # an object that is not a call
    ],
)
def test_text_or_a_valid_call(constraints: Constraints, text: str, ok: bool) -> None:
    spec = strict_calls_constraint(TOOLS)
    assert spec is not None
    assert accepts(constraints, spec, text) is ok


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (CALL, True),
        ('{"s":"hi"}', True),
        ("It is sunny.", False),  # free text is no answer in the schema
        ('{"s":"far too long a string"}', False),
    ],
)
def test_a_structured_answer_or_a_call(constraints: Constraints, text: str, ok: bool) -> None:
    answer = output_constraint({"type": "json_schema", "schema": ANSWER["schema"]}, "text.format")
    assert answer is not None
    assert accepts(constraints, answer_or_call(answer, TOOLS), text) is ok


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("It is sunny.", True),
        (f"Let me check.<tool_call>\n{CALL}\n</tool_call>", True),
        (f"<tool_call>\n{CALL}\n</tool_call>", True),
        ('<tool_call>\n{"name":"get_weather","arguments":{}}\n</tool_call>', False),
        ("text <tool_call> more text", False),  # the marker opens a call, nothing else
    ],
)
def test_text_or_a_call_between_the_models_markers(
    constraints: Constraints, text: str, ok: bool
) -> None:
    spec = native_strict_constraint(TOOLS, ("<tool_call>", "</tool_call>"))
    assert spec is not None
    assert accepts(constraints, spec, text) is ok


def test_a_required_call_between_the_models_markers(constraints: Constraints) -> None:
    spec = call_constraint(TOOLS, ("<tool_call>", "</tool_call>"))
    assert accepts(constraints, spec, f"<tool_call>\n{CALL}\n</tool_call>")
    assert not accepts(constraints, spec, "It is sunny.")
    assert not accepts(constraints, spec, CALL)  # without its markers


LOOSE = [  # not strict: OpenAI does not promise its arguments; once a grammar runs, we do
    {
        "type": "function",
        "function": {
            "name": "run",
            "parameters": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}},
                "required": ["cmd"],
            },
        },
    }
]


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ('{"name":"run","arguments":{"cmd":"ls"}}', True),
        ('{"name":"run","arguments":{}}', False),  # misses its required `cmd`
        ('{"s":"hi"}', True),
    ],
)
def test_a_loose_tools_call_is_held_to_its_schema_when_a_grammar_runs(
    constraints: Constraints, text: str, ok: bool
) -> None:
    answer = output_constraint({"type": "json_schema", "schema": ANSWER["schema"]}, "text.format")
    assert answer is not None
    assert accepts(constraints, answer_or_call(answer, LOOSE), text) is ok


def test_a_loose_tool_whose_schema_cannot_be_enforced_takes_any_object(
    constraints: Constraints,
) -> None:
    """Not a 400 (the tool is not strict): its arguments are any JSON object."""
    unenforceable = [
        {
            "type": "function",
            "function": {
                "name": "run",
                "parameters": {"type": "object", "not": {"required": ["cmd"]}},
            },
        }
    ]
    answer = output_constraint({"type": "json_object"}, "text.format")
    assert answer is not None
    spec = answer_or_call(answer, unenforceable)
    assert accepts(constraints, spec, '{"name":"run","arguments":{"cmd":"ls"}}')


TWO_TOOLS = [
    *TOOLS,
    {"type": "function", "function": {"name": "now", "strict": True, "parameters": {
        "type": "object", "properties": {}, "additionalProperties": False}}},
]  # fmt: skip
NOW = '{"name":"now","arguments":{}}'


@pytest.mark.parametrize(
    ("text", "parallel", "ok"),
    [
        (CALL, True, True),
        (f"[{CALL},{NOW}]", True, True),
        (f"[{CALL}]", True, True),
        ("[]", True, False),  # a list of no calls calls nothing
        (f"[{CALL},{NOW}]", False, False),  # parallel_tool_calls false: one call
        (CALL, False, True),
    ],
)
def test_a_required_call_may_be_several_when_parallel(
    constraints: Constraints, text: str, parallel: bool, ok: bool
) -> None:
    assert accepts(constraints, call_constraint(TWO_TOOLS, None, parallel), text) is ok


def test_required_calls_between_markers_may_repeat_when_parallel(
    constraints: Constraints,
) -> None:
    block = "<tool_call>\n{}\n</tool_call>"
    two = f"{block.format(CALL)}\n{block.format(NOW)}"
    markers = ("<tool_call>", "</tool_call>")
    assert accepts(constraints, call_constraint(TWO_TOOLS, markers, True), two)
    assert not accepts(constraints, call_constraint(TWO_TOOLS, markers, False), two)
    strict = native_strict_constraint(TWO_TOOLS, markers, True)
    assert strict is not None
    assert accepts(constraints, strict, f"Checking both.{two}")


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (f"[{CALL},{NOW}]", True),
        ("It is sunny.", True),
        ('[{"name":"get_weather","arguments":{}}]', False),  # a list must hold valid calls
    ],
)
def test_text_or_a_list_of_calls_when_parallel(
    constraints: Constraints, text: str, ok: bool
) -> None:
    spec = strict_calls_constraint(TWO_TOOLS, parallel=True)
    assert spec is not None
    assert accepts(constraints, spec, text) is ok


@pytest.mark.parametrize("opening", ["[", "```json\n"])
def test_prose_never_opens_like_a_call(constraints: Constraints, opening: str) -> None:
    """Else an invalid call would pass as prose and the splitter would still read it."""
    bad = '{"name":"get_weather","arguments":{"town":"Paris"}}'
    close = "]" if opening == "[" else "\n```"
    for parallel in (False, True):
        spec = strict_calls_constraint(TOOLS, parallel=parallel)
        assert spec is not None
        assert not accepts(constraints, spec, f"{opening}{bad}{close}")
