"""What is left of function calls when the output limit cuts the model short. Pure.

A call counts only once it is written in full: the calls completed before the cut are kept,
the one cut mid-way is dropped (never guessed at, never turned into text), and so is text that
can only be the beginning of a call. Where the model may also answer in JSON (tool_choice auto),
a cut object is a call's beginning only while it names an offered tool or has no key yet.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic_core import from_json

# Formats that write several calls between one pair of markers (mlx-lm's parser module, or
# "mistral_v03"): where each call ends, and what closes the calls before it for their parser.
SECTIONS = {
    "kimi_k2": ("<|tool_call_end|>", ""),
    "kimi_k3": ("<|close|>call<|sep|>", ""),
    "minimax_m2": ("</invoke>", ""),
    "muse_spark": ("</atem:invoke>", ""),
    "pythonic": (")", "]"),
    "mistral": ("}", ""),  # NAME[ARGS]{...}, repeated: the calls run to the end of the output
    "mistral_v03": ("}", "]"),  # one JSON list of calls
}

_CALL_KEYS = {"name", "arguments", "parameters", "function", "type", "id"}
_FENCE = re.compile(r"```(?:json)?\s*")
_WRAPPER = re.compile(r'\{\s*"tool_calls"\s*(?::\s*|$)')
_OPENING = re.compile(r'\{\s*(?:"([^"\\]*))?')  # an object before its first key is complete
# Tried in turn after a cut fragment: a placeholder ("") for the value of a key written
# without one, so that the key shows; where no value is due it fails or changes no key.
_VALUE_DUE = ('""', ':""', "")
_decoder = json.JSONDecoder()


def closed_prefixes(body: str, family: str | None) -> list[str]:
    """The beginnings of a cut call section that end where one of its calls ends, longest
    first, each closed for its parser; none for a format of one call per pair of markers."""
    if family not in SECTIONS:
        return []
    end, close = SECTIONS[family]
    out = []
    at = body.rfind(end)
    while at >= 0:
        out.append(body[: at + len(end)] + close)
        at = body.rfind(end, 0, at)
    return out


def plain_items(text: str, names: set[str], forced: bool = False) -> list[Any] | None:
    """A plain-JSON output cut short: its values written in full (calls, if it holds calls),
    or None where the rest is not the beginning of a call to one of `names` (it is text).
    `forced`: a grammar forces the call format, so an unfinished object is a call's."""
    body = text.lstrip()
    if "```json".startswith(body):
        return []  # nothing yet, or the start of a code fence
    if fence := _FENCE.match(body):
        body = body[fence.end() :]
    if wrapper := _WRAPPER.match(body):  # {"tool_calls": [...]}: its elements can only be calls
        body, forced = body[wrapper.end() :], True
    items, rest = _elements(body) if body.startswith("[") else _whole(body)
    return items if _opens_calls(rest, names, forced) else None


def _elements(body: str) -> tuple[list[Any], str]:
    """A JSON list cut short: its elements written in full, and the text after them."""
    items: list[Any] = []
    at = 1
    while True:
        at = _skip_space(body, at)
        try:
            item, at = _decoder.raw_decode(body, at)
        except json.JSONDecodeError:
            return items, body[at:]
        items.append(item)
        at = _skip_space(body, at)
        if not body.startswith(",", at):
            return items, body[at:]
        at += 1


def _whole(body: str) -> tuple[list[Any], str]:
    try:
        value, at = _decoder.raw_decode(body)
    except json.JSONDecodeError:
        return [], body
    return [value], body[at:]


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _opens_calls(rest: str, names: set[str], forced: bool) -> bool:
    """`rest` (what follows the values written in full) can only close them, or begin a call."""
    closing = rest.strip().lstrip("]} \t\r\n")
    if "```".startswith(closing):
        return True
    if not forced:
        return _naming(closing, names)
    try:
        value = from_json(closing, allow_partial=True)  # a partial string or key is left out
    except ValueError:
        return False
    return all(_call_like(v, names) for v in (value if isinstance(value, list) else [value]))


def _naming(fragment: str, names: set[str]) -> bool:
    """Unforced, the model may be writing a JSON answer: a cut object is a call's beginning
    only while it names an offered tool, or before it has completed a key (a call's, if any)."""
    if opening := _OPENING.fullmatch(fragment):
        key = opening.group(1) or ""
        return any(k.startswith(key) for k in _CALL_KEYS | {"tool_calls"})
    value = _as_written(fragment)
    items = value if isinstance(value, list) else [value]
    return all(_call_like(v, names, named=True) for v in items)


def _as_written(fragment: str) -> Any:
    """A cut JSON value, its last string as far as written and a key whose value is not yet
    begun kept (valued ""); None if it is not JSON."""
    for due in _VALUE_DUE:
        try:
            return from_json(fragment + due, allow_partial="trailing-strings")
        except ValueError:
            continue
    return None


def _call_like(value: Any, names: set[str], named: bool = False) -> bool:
    """The beginning of a call: only a call's keys, and a name (if any yet; `named`: there
    must be one) that is offered."""
    if not isinstance(value, dict) or not value.keys() <= _CALL_KEYS:
        return False
    if "function" in value:  # OpenAI's nested shape
        value = value["function"]
        if not isinstance(value, dict) or not value.keys() <= {"name", "arguments", "parameters"}:
            return False
    if named and "name" not in value:
        return False
    name = value.get("name", "")
    return isinstance(name, str) and any(n.startswith(name) for n in names)
