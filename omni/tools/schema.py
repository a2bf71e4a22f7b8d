"""Structured outputs: the grammar a request's output must follow, checked before anything is
written (an unsupported schema is a 400 that names it)."""

from __future__ import annotations

from typing import Any

from omni.errors import InvalidRequest
from omni.ports.chat import ToolFormat
from omni.tools.grammar import check_schema
from omni.tools.lark import GrammarError
from omni.tools.policy import Mode, json_markers, own_format, plain_calls


def decoding_constraint(
    calls: ToolFormat,
    tools: list[dict[str, Any]],
    mode: Mode,
    fmt: dict[str, Any] | None,
    param: str,
    parallel: bool = True,
) -> dict[str, Any] | None:
    """The grammar a request's output must follow, if any: a required call (in the model's
    own format when that is JSON between markers), else the answer format `fmt` (Responses'
    `text.format` or Chat's `response_format`, at `param`), with strict tools' calls
    allowed under tool_choice auto. `calls`: how the model writes calls; `parallel`
    (parallel_tool_calls): one call or several."""
    markers = json_markers(calls)
    family = own_format(calls, tools) if tools else None
    if mode == "required":
        if family is not None:  # in the model's own format, checked like the JSON ones
            _check_all(tools)
            return {**family, "required": True, "repeat": parallel}
        return call_constraint(tools, markers, parallel)
    constraint = output_constraint(fmt, param)
    if mode != "auto" or not tools:
        return constraint
    if plain_calls(calls):
        if constraint is None:
            return strict_calls_constraint(tools, parallel)
        return answer_or_call(constraint, tools, parallel)
    if constraint is None and markers is not None:
        return native_strict_constraint(tools, markers, parallel)
    if constraint is None and family is not None and any(_strict(t) for t in tools):
        _check_all([t for t in tools if _strict(t)])  # a strict tool's schema: 400 if not
        try:
            _check_all([t for t in tools if not _strict(t)])
        except InvalidRequest:  # another tool's cannot be enforced: no grammar, as before
            return None
        return {**family, "required": False, "repeat": parallel}
    return constraint


def _strict(tool: dict[str, Any]) -> bool:
    return bool(tool["function"].get("strict"))


def _check_all(tools: list[dict[str, Any]]) -> None:
    for tool in tools:
        _checked_params(tool)


def _checked_params(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameters schema; a 400 naming the tool if the grammar cannot enforce it."""
    params: dict[str, Any] = tool["function"].get("parameters") or {"type": "object"}
    _check(params, f"tools[{tool['function']['name']}].parameters")
    return params


def output_constraint(fmt: dict[str, Any] | None, param: str) -> dict[str, Any] | None:
    """Responses' `text.format` or Chat's `response_format` → a constraint (or None: text).
    Chat nests the schema under `json_schema`; Responses keeps it flat."""
    if fmt is not None and not isinstance(fmt, dict):
        raise InvalidRequest(f"'{param}' must be an object.", param=param)
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
    tools: list[dict[str, Any]], markers: tuple[str, str] | None = None, parallel: bool = False
) -> dict[str, Any]:
    """The output must be a call of one of `tools` (chat shape), its arguments valid against
    that tool's parameters: plain JSON (a list of them, if `parallel`), or JSON between the
    model's own `markers` (several such blocks, if `parallel`)."""
    schema = _call_schema(tools, strict_only=False)
    if markers is not None:
        return {
            "type": "native_call",
            "start": markers[0],
            "end": markers[1],
            "schema": schema,
            "required": True,
            "repeat": parallel,
        }
    return {"type": "json_schema", "schema": _one_or_more(schema) if parallel else schema}


def native_strict_constraint(
    tools: list[dict[str, Any]], markers: tuple[str, str], parallel: bool = False
) -> dict[str, Any] | None:
    """tool_choice auto with strict tools, for a model whose calls are JSON between markers:
    free text without the marker, or text then a valid call (or several, if `parallel`)."""
    if not any(_strict(t) for t in tools):
        return None
    schema = _call_schema(tools, strict_only=True)
    return {
        "type": "native_call",
        "start": markers[0],
        "end": markers[1],
        "schema": schema,
        "repeat": parallel,
    }


def strict_calls_constraint(
    tools: list[dict[str, Any]], parallel: bool = False
) -> dict[str, Any] | None:
    """The model may answer in text or call a tool (plain JSON calls): when a tool is
    `strict`, an output that opens like a call (`{`, `[`, a code fence) must be a valid call
    (or, if `parallel`, a list of them). None: no strict tool."""
    if not any(_strict(t) for t in tools):
        return None
    schema = _call_schema(tools, strict_only=True)
    if parallel:
        return {"type": "text_or_call", "schema": _one_or_more(schema)}
    return {"type": "text_or_call", "schema": schema}


def _one_or_more(call: dict[str, Any]) -> dict[str, Any]:
    """One call, or a list of calls (parallel_tool_calls): both are read as calls."""
    return {"anyOf": [call, {"type": "array", "items": call, "minItems": 1}]}


def _call_schema(tools: list[dict[str, Any]], strict_only: bool) -> dict[str, Any]:
    """One call of one of `tools`. Under `strict_only` only strict tools must enforce their
    parameters (an unenforceable schema is a 400); the others are enforced where the
    grammar engine can (a grammar is in force anyway, and a call that misses a required
    field only fails in the client), else any JSON object."""
    options = []
    for tool in tools:
        if strict_only and not _strict(tool):
            try:
                params = _checked_params(tool)
            except InvalidRequest:
                params = {"type": "object"}
        else:
            params = _checked_params(tool)
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool["function"]["name"]}, "arguments": params},
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


def answer_or_call(
    answer: dict[str, Any], tools: list[dict[str, Any]], parallel: bool = False
) -> dict[str, Any]:
    """A structured answer with tools the model may call: the answer's schema, or a call
    (plain JSON, its arguments valid where the schema can be enforced; a list of calls too,
    if `parallel`)."""
    schema = answer.get("schema") if answer["type"] == "json_schema" else {"type": "object"}
    call = _call_schema(tools, strict_only=True)
    return {
        "type": "answer_or_call",
        "schema": _one_or_more(call) if parallel else call,
        "answer": schema,
    }
