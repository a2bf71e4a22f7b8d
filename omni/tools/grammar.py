"""Constrained decoding's grammars: the lark grammar (llguidance's dialect) a `json_schema`,
`json_object` or a model family's tool calls must follow, and the check that a schema can be
enforced. The engine process compiles them and applies their token masks
(omni.runtime.chat.constraints)."""

from __future__ import annotations

from typing import Any

import llguidance
from llguidance import LLMatcher

from omni.tools.families import family_rules
from omni.tools.lark import JSON_OPTIONS, GrammarError, Literals, compile_lark, json_arg


def grammar_for(spec: dict[str, Any], specials: dict[str, int] | None = None) -> str:
    """The llguidance grammar of a constraint spec (omni.tools.schema builds them):
    `json_schema`, `json_object`, `text_or_call` (free text that does not open like a call,
    or a call), `answer_or_call`, `native_call` (JSON between the model's markers) or
    `family_call` (a family's own format); not yet validated.
    `specials`: the tokenizer's added tokens (text -> id); a marker that is one of them is
    written as that token, which llguidance never matches by its spelling."""
    kind = spec.get("type")
    lit = Literals(specials or {})
    if kind == "answer_or_call":  # an answer in its schema, or a call (both JSON)
        call, answer = json_arg(spec.get("schema", {})), json_arg(spec.get("answer", {}))
        return compile_lark(f"start: call | answer\ncall: {call}\nanswer: {answer}\n")
    if kind == "native_call":  # calls between a model's own markers, JSON inside
        rest = f'"\\n" call "\\n" {lit(spec["end"])}'
        more = f' ("\\n" {lit(spec["start"])} {rest})*' if spec.get("repeat") else ""
        rules = lit.opening(spec["start"], f"{rest}{more}", bool(spec.get("required")))
        return compile_lark(rules + f"call: {json_arg(spec.get('schema', {}))}\n")
    if kind == "family_call":  # calls in a model family's own, not-JSON, format
        return compile_lark(family_rules(spec, lit))
    if kind == "text_or_call":
        # Prose never opens like a call (an object, a list, a code fence): those are calls,
        # and must be valid ones.
        call = json_arg(spec.get("schema", {}))
        return compile_lark(
            f"start: call | prose\ncall: {call}\nprose: /\\s*[^{{\\[`\\s][\\s\\S]*/\n"
        )
    if kind == "json_object":
        schema: Any = {"type": "object"}
    elif kind == "json_schema":
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise GrammarError("json_schema needs a 'schema' object")
    else:
        raise GrammarError(f"unsupported constraint type: {kind!r}")
    try:
        return LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)  # type: ignore[arg-type]
    except ValueError as exc:
        raise GrammarError(f"invalid schema: {exc}") from exc


def check_schema(schema: dict[str, Any]) -> None:
    """Validate without a tokenizer, in well under a millisecond for ordinary schemas."""
    validate(grammar_for({"type": "json_schema", "schema": schema}))


def validate(grammar: str, tokenizer: llguidance.LLTokenizer | None = None) -> None:
    failed, messages = LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
    if failed:
        raise GrammarError(f"schema not supported: {messages[0]}")
