"""Lark text (llguidance's dialect) for constrained decoding: literals, JSON arguments,
regex escapes, and compiling rules, whose failures are GrammarErrors."""

from __future__ import annotations

import json
from typing import Any

from llguidance import LLMatcher

# Compact JSON, as OpenAI writes it: flexible whitespace lets a small model pad forever.
JSON_OPTIONS: dict[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ",",
    "key_separator": ":",
}


class GrammarError(ValueError):
    """A schema the engine cannot enforce; the message names the unsupported feature."""


quote = json.dumps  # a lark string literal


def compile_lark(rules: str) -> str:
    try:
        return LLMatcher.grammar_from_lark(rules)
    except ValueError as exc:
        raise GrammarError(f"invalid schema: {exc}") from exc


class Literals:
    """Literal text as lark: quoted strings, except where the text holds one of the
    tokenizer's added tokens (call markers usually are: <tool_call>, [TOOL_CALLS], ...),
    which become token references `<[id]>`."""

    def __init__(self, specials: dict[str, int]):
        self.specials = sorted(
            ((text, i) for text, i in specials.items() if len(text) > 1),
            key=lambda item: -len(item[0]),
        )

    def __call__(self, text: str) -> str:
        parts, plain, i = [], "", 0
        while i < len(text):
            found = next(((t, n) for t, n in self.specials if text.startswith(t, i)), None)
            if found is None:
                plain += text[i]
                i += 1
                continue
            if plain:
                parts.append(quote(plain))
            parts.append(f"<[{found[1]}]>")
            plain, i = "", i + len(found[0])
        if plain:
            parts.append(quote(plain))
        return " ".join(parts) or '""'

    def split(self, text: str) -> tuple[str, str]:
        """`text` cut before its first added token: (plain text, the rest)."""
        at = min((text.find(t) for t, _ in self.specials if t in text), default=len(text))
        return text[:at], text[at:]

    def opening(self, start: str, rest: str, required: bool) -> str:
        """`start: START rest` for a required call; else free text without the marker, or
        text then the marker and `rest`."""
        if required:
            return f"start: {self(start)} {rest}\n"
        mark = regex_escape(start)
        prose = f"PROSE: /(?s:.+)/ & ~/(?s:.*{mark}.*)/\n"
        if self.split(start)[0] != start:  # the marker is a token: it ends any text
            return f"start: PROSE | PROSE? {self(start)} {rest}\n" + prose
        # text that ends with the marker, and holds it nowhere else
        head = f"HEAD: /(?s:.*){mark}/ & ~/(?s:.*{mark}.+)/\n"
        return f"start: PROSE | HEAD {rest}\n" + prose + head


def json_arg(params: dict[str, Any]) -> str:
    return f"%json {json.dumps({**params, 'x-guidance': JSON_OPTIONS})}"


def regex_escape(text: str) -> str:
    """`text` as a literal inside a lark /regex/."""
    return "".join("\\n" if c == "\n" else "\\" + c if c in "\\.+*?()|[]{}^$/" else c for c in text)
