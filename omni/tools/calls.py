"""Function calls out of generated text. Pure: text in, text and calls out.

A model with a tool-call format that mlx-lm knows (its tokenizer names the markers and the
parser, chosen from the chat template as mlx-lm does) writes calls between markers; the text
between them goes to that parser, and the markers never reach the answer. A model without one
is asked (by the prompt, or by a grammar) to answer with plain JSON calls: an output that opens
with `{`, `[` or a code fence is held back until the end and becomes calls if it parses as
such, or text if not. An output the limit cut short keeps the calls it completed and drops
the one it was writing (omni.tools.cut); unless a call is forced, a cut JSON object
that names no offered tool is an answer, kept as text.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from omni.ports.chat import ToolFormat
from omni.tools.cut import closed_prefixes, plain_items

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    arguments: str  # a JSON text, as the APIs carry it


Segment = tuple[Literal["text"], str] | tuple[Literal["call"], Call]
E = TypeVar("E")


def routed(
    segments: list[Segment], text: Callable[[str], list[E]], call: Callable[[Call], list[E]]
) -> list[E]:
    """The events of `segments`, in order: `text`'s for answer text, `call`'s for a call."""
    events: list[E] = []
    for kind, value in segments:
        if kind == "text":
            assert isinstance(value, str)
            events += text(value)
        else:
            assert isinstance(value, Call)
            events += call(value)
    return events


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class CallSplitter:
    """Splits streamed text into answer text and calls, holding back only what may still turn
    out to be (part of) a call."""

    def __init__(
        self,
        fmt: ToolFormat,
        tools: list[dict[str, Any]],
        max_calls: int | None = None,
        forced: bool = False,
    ):
        self.fmt = fmt
        self.max_calls = max_calls  # parallel_tool_calls false: 1 (later calls are dropped)
        self.forced = forced  # a grammar forces a call: a cut JSON output can only be one
        self.tools = tools  # chat shape: {"type": "function", "function": {...}}
        self.names = {t["function"]["name"] for t in tools}
        self.native = bool(fmt.start and fmt.parser)
        self._held = ""  # text not yet released
        self._inside = False  # between native markers
        self._json: bool | None = None  # plain-JSON mode: undecided, buffering, or text
        self._gap = ""  # whitespace that may only separate calls (released with later text)
        self._in_text = False  # text (not only whitespace) came since the start or last call
        self.calls = 0
        self.dropped = False  # the output was cut while (perhaps) writing a call: dropped

    def feed(self, text: str) -> list[Segment]:
        if not text:
            return []
        self._held += text
        return self._spaced(self._native() if self.native else self._plain())

    def finish(self, cut: bool = False) -> list[Segment]:
        """The rest of the output. `cut`: the output limit (or a cancel) ended it, so a call
        being written is unfinished: dropped, with what can only be its beginning."""
        out = self._spaced(self._finish_native(cut) if self.native else self._finish_plain(cut))
        gap, self._gap = self._gap, ""
        if gap and not self.calls and not self.dropped:  # a whitespace answer is an answer
            out.append(("text", gap))
        return out

    def _spaced(self, segments: list[Segment]) -> list[Segment]:
        """Whitespace-only text that opens the output or follows a call is held: between
        calls it is not an answer (a message of newlines), before other text it is part of
        it. Within text, whitespace flows as it comes."""
        out: list[Segment] = []
        for seg in segments:
            if seg[0] == "call":
                self._gap, self._in_text = "", False
                out.append(seg)
            elif not self._in_text and not seg[1].strip():
                self._gap += seg[1]
            else:
                out.append(("text", self._gap + seg[1]))
                self._gap, self._in_text = "", True
        return out

    def _finish_native(self, cut: bool) -> list[Segment]:
        held, self._held = self._held, ""
        if cut and (self._inside or held):  # inside a call, or at what may begin a marker
            self.dropped = True
            return self._cut_native(held) if self._inside else []
        if self._inside and not self.fmt.end:  # a format whose call runs to the end
            return self._parse_native(held)
        if self._inside:  # ended before its end marker: kept as the model wrote it
            return [("text", f"{self.fmt.start}{held}")]
        return [("text", held)] if held else []

    def _cut_native(self, body: str) -> list[Segment]:
        """The calls a cut section completed (a format of one call per pair of markers has
        none: its end marker would have made the call)."""
        for closed in closed_prefixes(body, self.fmt.family):
            calls = self._native_calls(closed)
            if calls is not None:
                return self._counted(calls)
        return []

    def _finish_plain(self, cut: bool) -> list[Segment]:
        held, self._held = self._held, ""
        if self._json:
            calls = self._parse_plain(held)
            if calls:
                return calls
            if cut and (written := plain_items(held, self.names, self.forced)) is not None:
                complete = self._plain_calls(written) if written else []
                if complete is not None:  # else a value written in full is not a call: text
                    self.dropped = True
                    return self._counted(complete)
        return [("text", held)] if held else []

    def _native(self) -> list[Segment]:
        start, end = self.fmt.start or "", self.fmt.end or ""
        out: list[Segment] = []
        while True:
            if not self._inside:
                at = self._held.find(start)
                if at < 0:
                    released, self._held = held_back(self._held, start)
                    if released:
                        out.append(("text", released))
                    return out
                if at:
                    out.append(("text", self._held[:at]))
                self._held = self._held[at + len(start) :]
                self._inside = True
            if not end:  # the call runs to the end of the output
                return out
            at = self._held.find(end)
            if at < 0:
                return out
            body, self._held = self._held[:at], self._held[at + len(end) :]
            self._inside = False
            out += self._parse_native(body)

    def _parse_native(self, body: str) -> list[Segment]:
        calls = self._native_calls(body, warn=True)
        if calls is None:  # a malformed call stays visible as text
            return [("text", f"{self.fmt.start}{body}{self.fmt.end or ''}")]
        return self._counted(calls)

    def _native_calls(self, body: str, warn: bool = False) -> list[Call | None] | None:
        """The calls between a pair of markers, or None: the parser rejects them, or one is
        not a call of an offered tool."""
        assert self.fmt.parser is not None
        try:
            parsed = self.fmt.parser(body, self.tools)
        except Exception as exc:  # noqa: BLE001 - each parser raises its own kind
            if warn:
                log.warning("could not parse a tool call (%s): keeping it as text", exc)
            return None
        calls = [_call(c) for c in (parsed if isinstance(parsed, list) else [parsed])]
        if not calls or not all(c is not None and c.name in self.names for c in calls):
            return None
        return calls

    def _plain(self) -> list[Segment]:
        if self._json is None:
            head = self._held.lstrip()
            if not head:
                return []  # only whitespace so far: undecided
            self._json = head[0] in "{[`"
        if self._json:
            return []  # held back: a call is only known at the end
        text, self._held = self._held, ""
        return [("text", text)]

    def _parse_plain(self, text: str) -> list[Segment]:
        raw = text.strip()
        if fenced := _FENCE.match(raw):
            raw = fenced.group(1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return []
        if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
            value = value["tool_calls"]
        calls = self._plain_calls(value if isinstance(value, list) else [value])
        return self._counted(calls) if calls else []

    def _plain_calls(self, items: list[Any]) -> list[Call | None] | None:
        """`items` as calls, or None: one is not a call of an offered tool."""
        calls = [_call(item) for item in items]
        if not calls or not all(c is not None and c.name in self.names for c in calls):
            return None
        return calls

    def _counted(self, calls: list[Call | None]) -> list[Segment]:
        """Calls, as many as the limit leaves room for: a call beyond it is not made."""
        room = len(calls) if self.max_calls is None else max(0, self.max_calls - self.calls)
        if room < len(calls):
            log.info("dropping %d tool call(s): parallel_tool_calls is false", len(calls) - room)
        kept = [c for c in calls[:room] if c is not None]
        self.calls += len(kept)
        return [("call", c) for c in kept]


def _call(raw: Any) -> Call | None:
    """{"name", "arguments"} (or OpenAI's nested {"function": {...}}) → a Call."""
    if not isinstance(raw, dict):
        return None
    if isinstance(raw.get("function"), dict):
        raw = raw["function"]
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = raw.get("arguments", raw.get("parameters", {}))
    if isinstance(args, str):  # OpenAI's shape: a JSON text (of an object)
        try:
            if not isinstance(json.loads(args), dict):
                return None
        except json.JSONDecodeError:
            return None
        return Call(name, args)
    if not isinstance(args, dict):
        return None
    return Call(name, json.dumps(args, ensure_ascii=False))


def partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that begins `marker` (it may complete later)."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def held_back(text: str, marker: str) -> tuple[str, str]:
    """`text` as (what may be released, the end held back as it may begin `marker`)."""
    at = len(text) - partial_suffix(text, marker)
    return text[:at], text[at:]


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses' flat function tools → the nested shape chat templates and parsers take."""
    out = []
    for tool in tools:
        if tool.get("type") != "function":
            continue
        nested = tool.get("function")
        function: dict[str, Any] = nested if isinstance(nested, dict) else tool
        keys = ("name", "description", "parameters", "strict")
        out.append(
            {
                "type": "function",
                "function": {k: function[k] for k in keys if function.get(k) is not None},
            }
        )
    return out


def plain_tools_prompt(tools: list[dict[str, Any]]) -> str:
    """For templates that know no tools: the tools and the answer format, as instructions."""
    lines = [
        "You can call these functions. To call one, answer with only a JSON object "
        '{"name": <function name>, "arguments": <arguments object>} (or a JSON list of such '
        "objects to call several), and nothing else.",
    ]
    for tool in tools:
        lines.append(json.dumps(tool["function"], ensure_ascii=False))
    return "\n".join(lines)
