"""Model families' own call formats (Qwen3-Coder, GLM, MiniMax, Kimi, Mistral, LFM2) as
grammars: which tools a family's format carries faithfully, and the lark rules of its calls."""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, replace
from typing import Any

from omni.tools.lark import Literals, json_arg, regex_escape


@dataclass(frozen=True, slots=True)
class CallFamily:
    """How a model family writes calls (mlx-lm's parser for it reads them back). A call is
    `head NAME name_end ARGUMENTS tail`; calls come each between `start` and `close`
    (joined by `sep`), or, in a `section`, all between one `start`+`section_open` and
    `close`. Arguments are one JSON object, or, with `kv`, each parameter as
    `kv[0] KEY kv[1] VALUE kv[2]`: a string raw, anything else as JSON text. A raw string
    holds none of `stops` (where the parser would end it); `strips`: the parser strips
    values (so a string may not begin or end with whitespace); `null_is_none`: it reads
    the text `null` as None. `indexed`: a call index `:N` before `name_end` (Kimi)."""

    start: str
    close: str
    head: str
    name_end: str
    tail: str = ""
    sep: str = ""
    section: bool = False
    section_open: str = ""
    kv: tuple[str, str, str] | None = None
    stops: tuple[str, ...] = ()
    strips: bool = False
    null_is_none: bool = False
    indexed: bool = False
    section_close: str = ""  # before `close`, ending a section
    kv_sep: str | None = None  # parameters joined by this, rather than each closed by kv[2]
    kv_json: bool = False  # every value as JSON text, strings too
    names: str = r"[A-Za-z0-9_-]+"  # tool and parameter names the parser reads back whole


# <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>
_GLM = CallFamily(
    "<tool_call>",
    "</tool_call>",
    "",
    "",
    kv=("<arg_key>", "</arg_key><arg_value>", "</arg_value>"),
    stops=("</arg_value>", "<arg_key>", "</tool_call>"),
    strips=True,
)
CALL_FAMILIES: dict[str, CallFamily] = {  # by mlx-lm tool-parser module
    # <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
    "qwen3_coder": CallFamily(
        "<tool_call>",
        "</tool_call>",
        "\n<function=",
        ">\n",
        "</function>\n",
        sep="\n",
        kv=("<parameter=", ">\n", "\n</parameter>\n"),
        stops=("</parameter>", "<parameter=", "</function>", "</tool_call>"),
        null_is_none=True,
    ),
    "glm47": _GLM,
    # GLM's, each part on its own line
    "laguna": replace(
        _GLM, name_end="\n", sep="\n", kv=("<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n")
    ),
    # <minimax:tool_call>\n<invoke name="NAME">\n<parameter name="KEY">VALUE</parameter>\n
    # </invoke>\n</minimax:tool_call>
    "minimax_m2": CallFamily(
        "<minimax:tool_call>",
        "</minimax:tool_call>",
        '<invoke name="',
        '">\n',
        "</invoke>\n",
        section=True,
        section_open="\n",
        kv=('<parameter name="', '">', "</parameter>\n"),
        stops=("</parameter>", "<parameter", "</invoke>", "</minimax:tool_call>"),
        strips=True,
        null_is_none=True,
    ),
    # <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
    # <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>
    "kimi_k2": CallFamily(
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>functions.",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        section=True,
        indexed=True,
    ),
    # [TOOL_CALLS]NAME[ARGS]{...}: no end marker, the call runs to the end of the output
    "mistral": CallFamily("[TOOL_CALLS]", "", "", "[ARGS]"),
    # <|tool_call_start|>[NAME(KEY=VALUE, ...), ...]<|tool_call_end|> (LFM2): Python call
    # syntax, whose parser also reads JSON's true/false/null
    "pythonic": CallFamily(
        "<|tool_call_start|>",
        "<|tool_call_end|>",
        "",
        "(",
        ")",
        sep=", ",
        section=True,
        section_open="[",
        section_close="]",
        kv=("", "=", ""),
        kv_sep=", ",
        kv_json=True,
        names=r"[A-Za-z_][A-Za-z0-9_]*",
    ),
}
_RAW_TYPES = {"string", "integer", "number", "boolean", "object", "array"}
_PLAIN_STRING_KEYS = {
    "type",
    "description",
    "title",
    "examples",
    "default",
    "minLength",
    "maxLength",
}


_LONGEST_RAW = 256  # longer length bounds on raw strings: plain JSON instead
_SAFE_INTEGER = 2**53 - 1  # parsers may go through float()
_LARGEST_NUMBER = 1e15  # a bound llguidance compiles; past ~1e308 float() overflows in parsers


def family_tools(family: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """`tools` (chat shape) as a family_call spec lists them, or None if the family has no
    grammar here or a tool cannot be written in its format so that its parser reads it
    back exactly (then calls are forced as plain JSON instead)."""
    fam = CALL_FAMILIES.get(family)
    if fam is None:
        return None
    out = []
    for tool in tools:
        function = tool["function"]
        params = function.get("parameters") or {"type": "object", "properties": {}}
        if not _named(fam, str(function["name"])):
            return None
        if fam.kv is not None and not _kv_expressible(fam, params):
            return None
        out.append({"name": function["name"], "parameters": params})
    return out


def _within_limits(prop: dict[str, Any]) -> bool:
    """A number's bounds, if any, lie within what `_bounded` holds it to."""
    limit = {"integer": _SAFE_INTEGER, "number": _LARGEST_NUMBER}.get(str(prop.get("type")))
    if limit is None:
        return True
    bounds = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
    return all(
        not isinstance(prop.get(b), (int, float))
        or isinstance(prop.get(b), bool)
        or -limit <= prop[b] <= limit
        for b in bounds
    )


def _named(fam: CallFamily, name: str) -> bool:
    """A tool or parameter name the family's parser reads back whole (a Python keyword is
    no keyword argument)."""
    return bool(re.fullmatch(fam.names, name)) and not (fam.kv_json and keyword.iskeyword(name))


def _kv_expressible(fam: CallFamily, params: dict[str, Any]) -> bool:
    """Parameters a key/value format carries faithfully: an object of named properties,
    each of one plain type (mlx-lm's parsers convert a value by its schema's type)."""
    if params.get("type", "object") != "object" or params.get("additionalProperties") not in (
        None,
        False,
    ):
        return False
    if set(params) - {"type", "properties", "required", "additionalProperties", "description"}:
        return False
    properties = (params.get("properties") or {}).items()
    return all(_kv_property(fam, key, prop) for key, prop in properties)


def _kv_property(fam: CallFamily, key: str, prop: Any) -> bool:
    """One property a key/value format carries faithfully."""
    if not _named(fam, key) or not isinstance(prop, dict) or not _within_limits(prop):
        return False
    if fam.kv_json:  # any JSON value
        return True
    kind = prop.get("type")
    if not isinstance(kind, str) or kind not in _RAW_TYPES - {"object", "array"}:
        # (an object or array would be JSON text inside the tags, whose strings could
        # hold the tag that ends the value for the parser)
        return False
    return kind != "string" or _raw_string(fam, prop)


def _raw_string(fam: CallFamily, prop: dict[str, Any]) -> bool:
    """A string property the family's parser reads back exactly as raw text."""
    if set(prop) - _PLAIN_STRING_KEYS - {"enum"}:
        return False  # a pattern or format: only the JSON form can hold it
    if max(prop.get("minLength", 0), prop.get("maxLength", 0)) > _LONGEST_RAW:
        return False
    for value in prop.get("enum", []):
        if not isinstance(value, str) or any(stop in value for stop in fam.stops):
            return False
        if fam.strips and value != value.strip():
            return False
        if fam.null_is_none and value.lower() == "null":
            return False
    return True


def family_rules(spec: dict[str, Any], lit: Literals | None = None) -> str:
    """The lark grammar of a family_call spec: {"family", "tools": [{name, parameters}],
    "required": a call must be made (else: free text, or text then calls), "repeat":
    several calls (parallel_tool_calls)}."""
    lit = lit or Literals({})
    fam = CALL_FAMILIES[spec["family"]]
    rules: list[str] = []
    names = []
    for i, tool in enumerate(spec["tools"]):
        if fam.kv:
            args = _kv_args(fam, tool["parameters"], i, rules, lit)
        else:
            args = json_arg(tool["parameters"])
        index = '":" /[0-9]{1,3}/ ' if fam.indexed else ""
        rules.append(
            f"call{i}: {lit(fam.head + tool['name'])} {index}{lit(fam.name_end)} {args} "
            f"{lit(fam.tail)}"
        )
        names.append(f"call{i}")
    rules.append("call: " + " | ".join(names))
    repeat = bool(spec.get("repeat"))
    if fam.section:  # one section holds the calls
        calls = f"call ({lit(fam.sep)} call)*" if repeat else "call"
        rest = f"{lit(fam.section_open)} {calls} {lit(fam.section_close + fam.close)}"
    else:  # each call between its own markers
        more = f" ({lit(fam.sep + fam.start)} call {lit(fam.close)})*" if repeat else ""
        rest = f"call {lit(fam.close)}{more}"
    return lit.opening(fam.start, rest, bool(spec.get("required"))) + "\n".join(rules) + "\n"


def _kv_args(
    fam: CallFamily, params: dict[str, Any], i: int, rules: list[str], lit: Literals
) -> str:
    """Each property in the schema's order: a required one always, another optionally."""
    assert fam.kv is not None
    before, between, after = fam.kv
    required = set(params.get("required") or [])
    items = []
    for j, (key, prop) in enumerate((params.get("properties") or {}).items()):
        rule = f"p{i}_{j}"
        value = _kv_value(fam, prop, f"V{i}_{j}", rules, lit)
        rules.append(f"{rule}: {lit(before + key + between)} {value}")
        items.append((rule, key in required))
    if fam.kv_sep is None:  # each closed by its own text
        return " ".join(rule if needed else f"{rule}?" for rule, needed in items) or '""'
    # Joined by a separator: h_k starts at item k with nothing written yet, t_k follows
    # something already written (so it opens with the separator).
    sep = lit(fam.kv_sep)
    for k in reversed(range(len(items))):
        rule, needed = items[k]
        h_next, t_next = (f"h{i}_{k + 1}", f"t{i}_{k + 1}") if k + 1 < len(items) else ('""',) * 2
        rules.append(f"t{i}_{k}: {sep} {rule} {t_next}" + ("" if needed else f" | {t_next}"))
        rules.append(f"h{i}_{k}: {rule} {t_next}" + ("" if needed else f" | {h_next}"))
    return f"h{i}_0" if items else '""'


def _kv_value(
    fam: CallFamily, prop: dict[str, Any], name: str, rules: list[str], lit: Literals
) -> str:
    """A value and the text that closes it. A string is raw text up to the closing text
    (holding none of the family's stops: its parser would end the value there); anything
    else is JSON text (numbers bounded to what the parsers read back exactly)."""
    assert fam.kv is not None
    after = fam.kv[2]
    if fam.kv_json or prop.get("type") != "string":
        return f"{json_arg(_bounded(prop))} {lit(after)}"
    if "enum" in prop:
        return "(" + " | ".join(f"{lit(v)} {lit(after)}" for v in prop["enum"]) + ")"
    close, rest = lit.split(after)  # text up to an added token (which ends any text)
    if close == after:  # all text: the closing tag; a trailing newline follows it
        close = after.rstrip("\n") or after
        rest = after[len(close) :]
    mark = regex_escape(close)
    low, high = prop.get("minLength", 0), prop.get("maxLength")
    length = f"{{{low},{'' if high is None else high}}}"
    stops = "|".join(regex_escape(stop) for stop in fam.stops)
    parts = [f"/(?s:.{length}){mark}/", f"~/(?s:.*({stops}).*){mark}/"]
    if fam.strips:  # empty, or no whitespace at either end
        edge = "[^\\s\\x1c-\\x1f]"  # what Python's str.strip() keeps
        parts.append(f"/(?s:({edge}(.*{edge})?)?){mark}/")
    if fam.null_is_none:
        parts.append(f"~/(?i:null){mark}/")
    rules.append(f"{name}: " + " & ".join(parts))
    return f"{name} {lit(rest)}" if rest else name


def _bounded(prop: dict[str, Any]) -> dict[str, Any]:
    """A number's schema, held to values the family parsers read back exactly."""
    limit = {"integer": _SAFE_INTEGER, "number": _LARGEST_NUMBER}.get(prop.get("type", ""))
    if limit is None:
        return prop
    return {
        **prop,
        "minimum": max(prop.get("minimum", -limit), -limit),
        "maximum": min(prop.get("maximum", limit), limit),
    }
