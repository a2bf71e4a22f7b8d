"""Structured outputs: the grammar a request's output must follow, checked before anything is
written (an unsupported schema is a 400 that names it)."""

from __future__ import annotations

from typing import Any

from omni.engine.grammar import GrammarError, check_schema
from omni.engine.types import Engine
from omni.errors import InvalidRequest
from omni.service.tools import Mode, json_markers, plain_calls


def decoding_constraint(
    engine: Engine,
    tools: list[dict[str, Any]],
    mode: Mode,
    fmt: dict[str, Any] | None,
    param: str,
) -> dict[str, Any] | None:
    """The grammar a request's output must follow, if any: a required call (in the model's
    own format when that is JSON between markers), else the answer format `fmt` (Responses'
    `text.format` or Chat's `response_format`, at `param`), with strict tools' calls
    allowed under tool_choice auto."""
    markers = json_markers(engine)
    if mode == "required":
        return call_constraint(tools, (markers.start, markers.end) if markers else None)  # type: ignore[arg-type]
    constraint = output_constraint(fmt, param)
    if mode != "auto" or not tools:
        return constraint
    if plain_calls(engine):
        if constraint is None:
            return strict_calls_constraint(tools)
        return answer_or_call(constraint, tools)
    if constraint is None and markers is not None:
        return native_strict_constraint(tools, (markers.start, markers.end))  # type: ignore[arg-type]
    return constraint


def output_constraint(fmt: dict[str, Any] | None, param: str) -> dict[str, Any] | None:
    """Responses' `text.format` or Chat's `response_format` → a constraint (or None: text).
    Chat nests the schema under `json_schema`; Responses keeps it flat."""
    kind = (fmt or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise InvalidRequest(f"Unsupported format type {kind!r}.", param=f"{param}.type")
    assert fmt is not None
    nested = fmt.get("json_schema")
    body = nested if isinstance(nested, dict) else fmt
    where = f"{param}.json_schema.schema" if isinstance(nested, dict) else f"{param}.schema"
    schema = body.get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequest("A json_schema format needs a `schema` object.", param=where)
    _check(schema, where)
    return {"type": "json_schema", "schema": schema}


def call_constraint(
    tools: list[dict[str, Any]], markers: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The output must be one call of one of `tools` (chat shape), its arguments valid
    against that tool's parameters: plain JSON, or JSON between the model's own `markers`."""
    schema = _call_schema(tools, strict_only=False)
    if markers is not None:
        return {
            "type": "native_call",
            "start": markers[0],
            "end": markers[1],
            "schema": schema,
            "required": True,
        }
    return {"type": "json_schema", "schema": schema}


def native_strict_constraint(
    tools: list[dict[str, Any]], markers: tuple[str, str]
) -> dict[str, Any] | None:
    """tool_choice auto with strict tools, for a model whose calls are JSON between markers:
    free text without the marker, or text then one valid call."""
    if not any(t["function"].get("strict") for t in tools):
        return None
    schema = _call_schema(tools, strict_only=True)
    return {"type": "native_call", "start": markers[0], "end": markers[1], "schema": schema}


def strict_calls_constraint(tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The model may answer in text or call a tool (plain JSON calls): when a tool is
    `strict`, an output that opens with `{` must be a valid call. None: no strict tool."""
    if not any(t["function"].get("strict") for t in tools):
        return None
    return {"type": "text_or_call", "schema": _call_schema(tools, strict_only=True)}


def _call_schema(tools: list[dict[str, Any]], strict_only: bool) -> dict[str, Any]:
    """One call of one of `tools`. Under `strict_only` only strict tools must enforce their
    parameters (an unenforceable schema is a 400); the others are enforced where the
    grammar engine can (a grammar is in force anyway, and a call that misses a required
    field only fails in the client), else any JSON object."""
    options = []
    for tool in tools:
        function = tool["function"]
        params = function.get("parameters") or {"type": "object"}
        where = f"tools[{function['name']}].parameters"
        if strict_only and not function.get("strict"):
            try:
                check_schema(params)
            except GrammarError:
                params = {"type": "object"}
        else:
            _check(params, where)
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": function["name"]}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"anyOf": options}


def _check(schema: dict[str, Any], param: str) -> None:
    try:
        check_schema(schema)
    except GrammarError as exc:
        raise InvalidRequest(f"This schema cannot be enforced: {exc}", param=param) from None


def answer_or_call(answer: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A structured answer with tools the model may call: the answer's schema, or a call
    (plain JSON, its arguments valid where the schema can be enforced)."""
    schema = answer.get("schema") if answer["type"] == "json_schema" else {"type": "object"}
    return {
        "type": "answer_or_call",
        "schema": _call_schema(tools, strict_only=True),
        "answer": schema,
    }
