"""CallSplitter on recorded outputs of every tool-call family mlx-lm knows, and on plain JSON.

Each family's output is written the way its chat template teaches the model to call (the
markers and the parser are mlx-lm's own, as `TokenizerWrapper` hands them to the engine). A
stream may be cut anywhere, so every output is fed whole, a character at a time and in two
pieces split at every position: the segments must not depend on the cuts.
"""

from __future__ import annotations

import json
import pkgutil
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import mlx_lm.tool_parsers
import pytest
from mlx_lm.tool_parsers import (
    function_gemma,
    gemma4,
    glm47,
    json_tools,
    kimi_k2,
    kimi_k3,
    laguna,
    longcat,
    minicpm5,
    minimax_m2,
    mistral,
    muse_spark,
    pythonic,
    qwen3_coder,
)

from omni.ports.chat import ToolFormat
from omni.tools.calls import Call, CallSplitter, Segment, partial_suffix


def _tool(name: str, **properties: str) -> dict[str, Any]:
    schema = {k: {"type": v} for k, v in properties.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name.removeprefix('get_')} somewhere.",
            "parameters": {"type": "object", "properties": schema, "required": list(schema)},
        },
    }


TOOLS = [_tool("get_weather", city="string", days="integer"), _tool("get_time", timezone="string")]
WEATHER = {"city": "Paris", "days": 3}
TIME = {"timezone": "Europe/Paris"}


@dataclass(frozen=True)
class Family:
    """One family's recorded outputs: `call` asks get_weather(WEATHER); `two` asks it and then
    get_time(TIME); `broken` is a call its parser rejects (None: the parser never raises)."""

    id: str
    module: ModuleType
    before: str
    call: str
    two: str
    broken: str | None

    @property
    def fmt(self) -> ToolFormat:
        return ToolFormat(
            self.module.tool_call_start,
            self.module.tool_call_end,
            self.module.parse_tool_call,
            self.family,
        )

    @property
    def family(self) -> str:
        """As the engine names it: the parser's module (GLM-4.5's is GLM-4.7's)."""
        if self.id == "mistral_v03":
            return self.id
        return str(self.module.parse_tool_call.__module__).rsplit(".", 1)[-1]

    @property
    def start(self) -> str:
        return str(self.module.tool_call_start)

    @property
    def end(self) -> str:
        return str(self.module.tool_call_end)


FAMILIES = [
    # FunctionGemma answers a call with the call alone.
    Family(
        "function_gemma",
        function_gemma,
        "",
        "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}"
        "<end_function_call>",
        "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}"
        "<end_function_call><start_function_call>call:get_time{timezone:<escape>Europe/Paris"
        "<escape>}<end_function_call>",
        '<start_function_call>get_weather(city="Paris")<end_function_call>',
    ),
    Family(
        "gemma4",
        gemma4,
        "Let me check the forecast for Paris.",
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>',
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>'
        '<|tool_call>call:get_time{timezone:<|"|>Europe/Paris<|"|>}<tool_call|>',
        '<|tool_call>call:get_weather{city:<|"|>Paris<tool_call|>',
    ),
    # GLM-4.7 writes the arguments without newlines; GLM-4.5 (and Laguna) with them.
    Family(
        "glm47",
        glm47,
        "I'll look up the weather in Paris.",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
        "<tool_call>get_time<arg_key>timezone</arg_key><arg_value>Europe/Paris</arg_value>"
        "</tool_call>",
        None,  # falls back to a call named "unknown" (or the first word) instead of raising
    ),
    Family(
        "laguna",
        laguna,
        "I'll look up the weather in Paris.\n",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n"
        "<tool_call>get_time\n<arg_key>timezone</arg_key>\n<arg_value>Europe/Paris</arg_value>\n"
        "</tool_call>",
        None,  # glm47's parser
    ),
    # Hermes: Qwen2.5, Qwen3, and most fine-tunes with a "tool_call.name" template.
    Family(
        "json_tools",
        json_tools,
        "I'll check the weather in Paris for you.\n",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
        "</tool_call>",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
        '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"timezone": '
        '"Europe/Paris"}}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}\n'
        "</tool_call>",
    ),
    Family(
        "kimi_k2",
        kimi_k2,
        "I'll check the weather in Paris.",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|>'
        "<|tool_calls_section_end|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|>'
        "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>"
        '{"timezone": "Europe/Paris"}<|tool_call_end|><|tool_calls_section_end|>',
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        "<|tool_calls_section_end|>",
    ),
    # Kimi K3's XTML: typed arguments, or one raw JSON block.
    Family(
        "kimi_k3",
        kimi_k3,
        "On it.",
        '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
        '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'
        '<|open|>argument key="days" type="integer"<|sep|>3<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|>",
        '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
        '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'
        '<|open|>argument key="days" type="integer"<|sep|>3<|close|>argument<|sep|>'
        '<|close|>call<|sep|><|open|>call tool="get_time" index="2"<|sep|>'
        '<|open|>json type="object"<|sep|>{"timezone": "Europe/Paris"}<|close|>json<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|>",
        '<|open|>tools<|sep|><|open|>call index="1"<|sep|>'
        '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|>",
    ),
    # LongCat-Flash writes either key/value tags or a JSON object between its markers.
    Family(
        "longcat",
        longcat,
        "Let me check the weather.\n",
        "<longcat_tool_call>get_weather\n<longcat_arg_key>city</longcat_arg_key>\n"
        "<longcat_arg_value>Paris</longcat_arg_value>\n<longcat_arg_key>days</longcat_arg_key>\n"
        "<longcat_arg_value>3</longcat_arg_value>\n</longcat_tool_call>",
        "<longcat_tool_call>get_weather\n<longcat_arg_key>city</longcat_arg_key>\n"
        "<longcat_arg_value>Paris</longcat_arg_value>\n<longcat_arg_key>days</longcat_arg_key>\n"
        "<longcat_arg_value>3</longcat_arg_value>\n</longcat_tool_call>\n"
        "<longcat_tool_call>get_time\n<longcat_arg_key>timezone</longcat_arg_key>\n"
        "<longcat_arg_value>Europe/Paris</longcat_arg_value>\n</longcat_tool_call>",
        '<longcat_tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n'
        "</longcat_tool_call>",
    ),
    Family(
        "longcat_json",
        longcat,
        "Let me check the weather.\n",
        '<longcat_tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
        "\n</longcat_tool_call>",
        '<longcat_tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
        '\n</longcat_tool_call>\n<longcat_tool_call>\n{"name": "get_time", "arguments": '
        '{"timezone": "Europe/Paris"}}\n</longcat_tool_call>',
        '<longcat_tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n'
        "</longcat_tool_call>",
    ),
    # MiniCPM5: no wrapper, so `<function name=` itself is the start marker.
    Family(
        "minicpm5",
        minicpm5,
        "Let me look that up.\n",
        '<function name="get_weather"><param name="city">Paris</param>'
        '<param name="days">3</param></function>',
        '<function name="get_weather"><param name="city">Paris</param>'
        '<param name="days">3</param></function>\n<function name="get_time">'
        '<param name="timezone">Europe/Paris</param></function>',
        '<function name="get_weather"</function>',
    ),
    Family(
        "minimax_m2",
        minimax_m2,
        "I'll check the current weather in Paris.\n",
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
        '</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>',
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
        '</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n<invoke name="get_time">'
        '\n<parameter name="timezone">Europe/Paris</parameter>\n</invoke>\n</minimax:tool_call>',
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
        "</parameter>\n</minimax:tool_call>",
    ),
    # Mistral Small 3.2 / Devstral / Ministral 3 write NAME[ARGS]{...}; there is no end marker.
    Family(
        "mistral",
        mistral,
        "Let me check that for you.",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}',
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}'
        '[TOOL_CALLS]get_time[ARGS]{"timezone": "Europe/Paris"}',
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "da',
    ),
    # Mistral 7B v0.3 / Nemo write one JSON list, and nothing before it.
    Family(
        "mistral_v03",
        mistral,
        "",
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
        '{"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}]',
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": "Paris"}]',
    ),
    Family(
        "muse_spark",
        muse_spark,
        "Let me check.",
        '<atem:function_calls>\n<atem:invoke name="get_weather">\n'
        '<atem:parameter name="city">Paris</atem:parameter>\n'
        '<atem:parameter name="days">3</atem:parameter>\n</atem:invoke>\n</atem:function_calls>',
        '<atem:function_calls>\n<atem:invoke name="get_weather">\n'
        '<atem:parameter name="city">Paris</atem:parameter>\n'
        '<atem:parameter name="days">3</atem:parameter>\n</atem:invoke>\n'
        '<atem:invoke name="get_time">\n<atem:parameter name="timezone">Europe/Paris'
        "</atem:parameter>\n</atem:invoke>\n</atem:function_calls>",
        '<atem:function_calls>\n<atem:parameter name="city">Paris</atem:parameter>\n'
        "</atem:function_calls>",
    ),
    # LFM2 / LFM2.5: a Python list of calls.
    Family(
        "pythonic",
        pythonic,
        "Checking the weather in Paris.",
        '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>',
        '<|tool_call_start|>[get_weather(city="Paris", days=3), '
        'get_time(timezone="Europe/Paris")]<|tool_call_end|>',
        "<|tool_call_start|>get_weather city=Paris<|tool_call_end|>",
    ),
    Family(
        "qwen3_coder",
        qwen3_coder,
        "I'll check the weather in Paris.\n",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
        "<function=get_time>\n<parameter=timezone>\nEurope/Paris\n</parameter>\n</function>\n"
        "</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>",
    ),
]
WITH_END = [f for f in FAMILIES if f.end]
RAISING = [f for f in FAMILIES if f.broken is not None]


def ids(family: Family) -> str:
    return family.id


def run(fmt: ToolFormat, pieces: list[str]) -> tuple[list[Segment], list[Segment]]:
    """Feed the pieces; return what feed gave and what finish gave."""
    splitter = CallSplitter(fmt, TOOLS)
    fed: list[Segment] = []
    for piece in pieces:
        fed += splitter.feed(piece)
    return fed, splitter.finish()


def merged(segments: list[Segment]) -> list[Segment]:
    """Adjacent text segments joined: how the text was cut is not part of the answer."""
    out: list[Segment] = []
    for seg in segments:
        assert seg != ("text", ""), "an empty text segment"
        if seg[0] == "text" and out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + seg[1])
        else:
            out.append(seg)
    return out


def segments(fmt: ToolFormat, pieces: list[str]) -> list[Segment]:
    fed, finished = run(fmt, pieces)
    return merged(fed + finished)


def cuts(text: str) -> list[list[str]]:
    """Every way to feed `text`: whole, by character, and in two pieces at each position."""
    return [[text], list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]


def calls(segs: list[Segment]) -> list[tuple[str, Any]]:
    return [(s[1].name, json.loads(s[1].arguments)) for s in segs if isinstance(s[1], Call)]


def text_of(segs: list[Segment]) -> str:
    return "".join(s[1] for s in segs if isinstance(s[1], str))


def test_every_mlx_lm_family_has_a_recorded_output() -> None:
    shipped = {m.name for m in pkgutil.iter_modules(mlx_lm.tool_parsers.__path__)}
    assert shipped <= {f.module.__name__.rsplit(".", 1)[1] for f in FAMILIES}


# --- native markers ----------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES, ids=ids)
def test_one_call_after_text_whatever_the_cuts(family: Family) -> None:
    output = family.before + family.call
    expected: list[Segment] = [("text", family.before)] if family.before else []
    whole = segments(family.fmt, [output])
    assert whole[: len(expected)] == expected
    assert calls(whole) == [("get_weather", WEATHER)]
    assert len(whole) == len(expected) + 1
    for pieces in cuts(output):
        fed, finished = run(family.fmt, pieces)
        assert merged(fed + finished) == whole, pieces
        assert not [s for s in finished if s[0] == "text"], "text held until the end"
        for seg in fed + finished:
            if isinstance(seg[1], str):
                assert family.start not in seg[1]
                assert not family.end or family.end not in seg[1]


@pytest.mark.parametrize("family", FAMILIES, ids=ids)
def test_two_calls_in_one_output_come_in_order(family: Family) -> None:
    output = family.before + family.two
    for pieces in ([output], list(output)):
        segs = segments(family.fmt, pieces)
        assert calls(segs) == [("get_weather", WEATHER), ("get_time", TIME)]
        assert text_of(segs).strip() == family.before.strip()  # only newlines between calls


@pytest.mark.parametrize("family", WITH_END, ids=ids)
def test_text_after_a_closed_call_follows_it(family: Family) -> None:
    after = "\nChecking now."
    for pieces in ([family.call + after], list(family.call + after)):
        segs = segments(family.fmt, pieces)
        assert segs[0][0] == "call"
        assert segs[1:] == [("text", after)]


@pytest.mark.parametrize("family", RAISING, ids=ids)
def test_a_call_the_parser_rejects_stays_visible_as_text(family: Family) -> None:
    assert family.broken is not None
    output = family.before + family.broken
    with pytest.raises(Exception):  # noqa: B017 - each parser raises its own kind
        family.module.parse_tool_call(output.split(family.start, 1)[1].removesuffix(family.end))
    for pieces in ([output], list(output)):
        splitter = CallSplitter(family.fmt, TOOLS)
        segs = [s for p in pieces for s in splitter.feed(p)] + splitter.finish()
        assert not calls(segs)
        assert text_of(segs) == output
        assert splitter.calls == 0


@pytest.mark.parametrize("family", FAMILIES, ids=ids)
def test_a_start_marker_split_across_feeds_never_leaks(family: Family) -> None:
    for k in range(1, len(family.start)):
        splitter = CallSplitter(family.fmt, TOOLS)
        head = merged(splitter.feed(family.before + family.start[:k]))
        assert head == ([("text", family.before)] if family.before else [])
        rest = splitter.feed(family.call[k:]) + splitter.finish()
        assert calls(rest) == [("get_weather", WEATHER)]
        assert not text_of(rest)


@pytest.mark.parametrize("family", FAMILIES, ids=ids)
def test_what_only_looked_like_a_start_marker_comes_back_as_text(family: Family) -> None:
    output = f"{family.before} {family.start[:-1]}! and more"
    for pieces in cuts(output):
        assert segments(family.fmt, pieces) == [("text", output)]


def test_the_start_of_a_marker_is_held_then_released() -> None:
    fmt = ToolFormat(
        json_tools.tool_call_start, json_tools.tool_call_end, json_tools.parse_tool_call
    )
    splitter = CallSplitter(fmt, TOOLS)
    assert splitter.feed("Use a <tool") == [("text", "Use a ")]
    assert splitter.feed("box> here.") == [("text", "<toolbox> here.")]
    assert splitter.feed(" <tool_") == [("text", " ")]
    assert splitter.feed('call>\n{"name": "get_time", "arguments": {"timezone": "UTC"}}') == []
    assert splitter.feed("\n</tool_call>") == [("call", Call("get_time", '{"timezone": "UTC"}'))]
    assert splitter.finish() == []


def test_kimi_k3_response_wrappers_are_not_mistaken_for_the_tools_marker() -> None:
    k3 = next(f for f in FAMILIES if f.id == "kimi_k3")
    before = "<|open|>response<|sep|>On it.<|close|>response<|sep|>"
    for pieces in cuts(before + k3.call):
        segs = segments(k3.fmt, pieces)
        assert segs[0] == ("text", before)
        assert calls(segs) == [("get_weather", WEATHER)]


def test_mistral_runs_to_the_end_of_the_output() -> None:
    m = next(f for f in FAMILIES if f.id == "mistral")
    splitter = CallSplitter(m.fmt, TOOLS)
    assert splitter.feed(m.before + m.call) == [("text", m.before)]
    assert splitter.finish() == [("call", Call("get_weather", json.dumps(WEATHER)))]
    assert splitter.calls == 1


def test_a_call_cut_off_before_its_end_marker_stays_verbatim() -> None:
    """The model ended its turn halfway through a call its parser cannot read (not cut by the
    limit): the text it wrote comes back, and nothing it did not write (no end marker)."""
    wrong = {}
    for family in WITH_END:
        body = family.call[len(family.start) : -len(family.end)]
        half = body[: len(body) // 2]
        try:
            family.module.parse_tool_call(half, TOOLS)
            continue  # lenient parsers (GLM, LongCat, MiniCPM5, Muse) make a call of it
        except Exception:  # noqa: BLE001 - each parser raises its own kind
            pass
        output = family.before + family.start + half
        segs = segments(family.fmt, [output])
        if segs != [("text", output)]:
            wrong[family.id] = text_of(segs)[-40:]
    assert not wrong, "\n".join(f"{k}: ...{v!r}" for k, v in wrong.items())


@pytest.mark.parametrize(
    ("family_id", "body"),
    [
        ("json_tools", '<tool_call>\n{"name": "delete_files", "arguments": {}}\n</tool_call>'),
        ("glm47", '<tool_call>{"name": "get_weather", "arguments": {"city"</tool_call>'),
        ("glm47", "<tool_call>\n</tool_call>"),
        (
            "kimi_k2",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
            '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_calls_section_end|>',
        ),
    ],
    ids=["hermes-unknown-name", "glm-broken-json", "glm-empty", "kimi-k2-no-call-end"],
)
def test_a_native_call_to_a_tool_not_offered_stays_text(family_id: str, body: str) -> None:
    """As in plain JSON: a name the request did not offer (hallucinated, or a lenient parser's
    "unknown" or garbage) is no call."""
    family = next(f for f in FAMILIES if f.id == family_id)
    segs = segments(family.fmt, [body])
    assert segs == [("text", body)]


# --- plain JSON ----------------------------------------------------------------------------------

PLAIN = ToolFormat()
WEATHER_CALL = ("get_weather", WEATHER)
TIME_CALL = ("get_time", TIME)
W = json.dumps({"name": "get_weather", "arguments": WEATHER})
T = json.dumps({"name": "get_time", "arguments": TIME})


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (W, [WEATHER_CALL]),
        (f"```json\n{W}\n```", [WEATHER_CALL]),
        (f"```\n{W}\n```", [WEATHER_CALL]),
        (f"[{W}, {T}]", [WEATHER_CALL, TIME_CALL]),
        (f'{{"tool_calls": [{W}, {T}]}}', [WEATHER_CALL, TIME_CALL]),
        (
            json.dumps(
                {
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": json.dumps(WEATHER)},
                        }
                    ]
                }
            ),
            [WEATHER_CALL],
        ),
        (json.dumps({"type": "function", "function": json.loads(T)}), [TIME_CALL]),
        (json.dumps({"name": "get_weather", "parameters": WEATHER}), [WEATHER_CALL]),  # Llama 3
        (json.dumps({"name": "get_time"}), [("get_time", {})]),
        (f"\n  {W}\n", [WEATHER_CALL]),
    ],
    ids=[
        "object",
        "json-fence",
        "bare-fence",
        "list",
        "tool_calls",
        "openai-nested",
        "function-object",
        "parameters",
        "no-arguments",
        "whitespace-around",
    ],
)
def test_plain_json_calls(output: str, expected: list[tuple[str, Any]]) -> None:
    for pieces in ([output], list(output), [output[:7], output[7:]]):
        splitter = CallSplitter(PLAIN, TOOLS)
        fed = [s for p in pieces for s in splitter.feed(p)]
        assert fed == []  # held back: a call is only known at the end
        segs = splitter.finish()
        assert calls(segs) == expected
        assert not text_of(segs)
        assert splitter.calls == len(expected)


@pytest.mark.parametrize(
    "output",
    [
        json.dumps({"name": "delete_files", "arguments": {}}),
        f"[{W}, {json.dumps({'name': 'delete_files', 'arguments': {}})}]",
        '{"city": "Paris", "days": 3}',
        '{"name": "get_weather", "arguments": {"city": "Par',
        '{"tool_calls": []}',
        "[1] Paris is the capital of France.",
        "```python\nprint('hi')\n```",
        f"```json\n{W}\n```\nThat calls the weather tool.",
    ],
    ids=[
        "unknown-name",
        "one-unknown-in-list",
        "not-a-call",
        "truncated",
        "empty-tool-calls",
        "bracket-text",
        "python-fence",
        "fence-then-text",
    ],
)
def test_plain_json_that_is_not_a_call_comes_back_as_text_at_the_end(output: str) -> None:
    for pieces in ([output], list(output)):
        splitter = CallSplitter(PLAIN, TOOLS)
        assert [s for p in pieces for s in splitter.feed(p)] == []
        assert splitter.finish() == [("text", output)]
        assert splitter.calls == 0


@pytest.mark.parametrize(
    "output",
    [
        json.dumps({"name": "get_weather", "arguments": None}),
        json.dumps({"name": "get_weather", "arguments": "3"}),
        json.dumps({"name": "get_weather", "arguments": [1, 2]}),
    ],
    ids=["null", "string-of-a-number", "list"],
)
def test_plain_json_arguments_are_always_an_object(output: str) -> None:
    """OpenAI's `arguments` is a JSON object's text; anything else is no call."""
    splitter = CallSplitter(PLAIN, TOOLS)
    splitter.feed(output)
    for _name, arguments in calls(splitter.finish()):
        assert isinstance(arguments, dict)


def test_plain_text_streams_out_at_once() -> None:
    splitter = CallSplitter(PLAIN, TOOLS)
    assert splitter.feed("The") == [("text", "The")]
    assert splitter.feed(' weather tool takes {"city": ...}.') == [
        ("text", ' weather tool takes {"city": ...}.')
    ]
    assert splitter.finish() == []


def test_plain_leading_whitespace_is_kept_undecided() -> None:
    splitter = CallSplitter(PLAIN, TOOLS)
    assert splitter.feed("\n") == []
    assert splitter.feed("  ") == []
    assert splitter.feed("Hi") == [("text", "\n  Hi")]

    splitter = CallSplitter(PLAIN, TOOLS)
    assert splitter.feed(" \n") == []
    assert splitter.feed(W[:1]) == []
    assert splitter.feed(W[1:]) == []
    assert calls(splitter.finish()) == [WEATHER_CALL]

    splitter = CallSplitter(PLAIN, TOOLS)
    assert splitter.feed("  ") == []
    assert splitter.finish() == [("text", "  ")]


def test_plain_empty_output_gives_nothing() -> None:
    splitter = CallSplitter(PLAIN, TOOLS)
    assert splitter.feed("") == []
    assert splitter.finish() == []


# --- parallel_tool_calls false: one call at most -----------------------------------------------


@pytest.mark.parametrize("family", FAMILIES, ids=ids)
def test_without_parallel_calls_only_the_first_call_is_made(family: Family) -> None:
    splitter = CallSplitter(family.fmt, TOOLS, max_calls=1)
    segs = merged(splitter.feed(family.before + family.two) + splitter.finish())
    assert calls(segs) == [("get_weather", WEATHER)]
    assert splitter.calls == 1
    assert family.start not in text_of(segs)  # the dropped call does not leak as text


def test_without_parallel_calls_a_plain_json_list_makes_its_first_call() -> None:
    two = json.dumps(
        [
            {"name": "get_weather", "arguments": WEATHER},
            {"name": "get_time", "arguments": TIME},
        ]
    )
    splitter = CallSplitter(PLAIN, TOOLS, max_calls=1)
    segs = merged(splitter.feed(two) + splitter.finish())
    assert calls(segs) == [("get_weather", WEATHER)] and text_of(segs) == ""


@pytest.mark.parametrize("family", FAMILIES, ids=ids)
def test_whitespace_around_calls_is_no_answer(family: Family) -> None:
    """Newlines between or after calls would otherwise make a message of whitespace."""
    output = "\n" + family.two + ("\n\n" if family.end else "")
    for pieces in ([output], list(output)):
        segs = segments(family.fmt, pieces)
        assert calls(segs) == [("get_weather", WEATHER), ("get_time", TIME)]
        assert text_of(segs) == "", pieces


def test_an_answer_of_whitespace_only_is_kept() -> None:
    for fmt in (PLAIN, FAMILIES[0].fmt):
        assert text_of(segments(fmt, ["\n", " "])) == "\n "


# --- cut by the output limit -------------------------------------------------------------------
# Whether a grammar forces the call (tool_choice required or a named function) or the model chose
# to call (auto, the splitter's default): a cut call never comes back as text.


def cut_at(fmt: ToolFormat, output: str, i: int) -> list[list[Segment]]:
    """The first `i` characters of `output`, fed whole and in two pieces, finished as cut."""
    head = output[:i]
    out = []
    for pieces in ([head], [head[: i // 2], head[i // 2 :]]):
        splitter = CallSplitter(fmt, TOOLS)
        fed = [s for p in pieces for s in splitter.feed(p)]
        out.append(merged(fed + splitter.finish(cut=True)))
    return out


def cut_everywhere(fmt: ToolFormat, output: str, before: str = "") -> dict[int, list[Any]]:
    """Cut `output` at every position: the text is never more than `before` (less a marker's
    beginning), calls come in order and are never taken back. The calls at each cut."""
    made: dict[int, list[Any]] = {}
    for i in range(len(output) + 1):
        head = output[: min(i, len(before))]
        said = head[: len(head) - partial_suffix(head, fmt.start)] if fmt.start else head
        for segs in cut_at(fmt, output, i):
            assert text_of(segs) == said, (i, segs)
            made[i] = calls(segs)
            assert made[i] == [WEATHER_CALL, TIME_CALL][: len(made[i])], (i, segs)
            assert len(made[i]) >= len(made.get(i - 1, [])), (i, segs)
    return made


@pytest.mark.parametrize("family", FAMILIES, ids=ids)
def test_a_cut_call_is_dropped_and_the_complete_ones_are_kept(family: Family) -> None:
    output = family.before + family.two
    made = cut_everywhere(family.fmt, output, family.before)
    assert made[len(output)] == [WEATHER_CALL, TIME_CALL]
    assert made[output.index("Par", len(family.before)) + 3] == []  # in the first's arguments
    assert made[output.index("Europe/Pa") + 9] == [WEATHER_CALL]  # in the second's


@pytest.mark.parametrize(
    ("fmt", "call"),
    [(f.fmt, f.call) for f in FAMILIES] + [(PLAIN, W)],
    ids=[f.id for f in FAMILIES] + ["plain"],
)
def test_whitespace_before_a_cut_call_is_no_answer(fmt: ToolFormat, call: str) -> None:
    output = "\n" + call
    for i in range(2, len(output)):
        splitter = CallSplitter(fmt, TOOLS)
        segs = splitter.feed(output[:i]) + splitter.finish(cut=True)
        assert not text_of(segs), (i, segs)


NESTED = json.dumps(
    {
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for n, a in (WEATHER_CALL, TIME_CALL)
        ]
    }
)


@pytest.mark.parametrize(
    "output",
    [
        f"[{W}, {T}]",
        f"```json\n[{W},\n {T}]\n```",
        f'{{"tool_calls": [{W}, {T}]}}',
        NESTED,
    ],
    ids=["list", "fenced-list", "tool_calls", "openai-nested"],
)
def test_a_cut_plain_json_list_keeps_its_complete_calls(output: str) -> None:
    made = cut_everywhere(PLAIN, output)
    assert made[len(output)] == [WEATHER_CALL, TIME_CALL]
    assert made[output.index("Par") + 3] == []
    assert made[output.index("Europe/Pa") + 9] == [WEATHER_CALL]


@pytest.mark.parametrize("output", [W, f"```json\n{W}\n```"], ids=["object", "fenced"])
def test_a_cut_plain_json_call_is_dropped(output: str) -> None:
    made = cut_everywhere(PLAIN, output)
    assert made[len(output)] == [WEATHER_CALL]
    assert made[output.index("}") + 1] == []  # the arguments closed, the call not yet


@pytest.mark.parametrize(
    "output",
    [
        '{"answer": 42, "unit": "cel',
        '{"name": "Alice", "age": 3',
        '{"city": "Paris", "days": 3',
        "[1, 2, 3",
        "[1] Paris is the",
        "```python\nprint('hi",
        f'[{json.dumps({"name": "delete_files", "arguments": {}})}, {{"na',
    ],
    ids=[
        "answer",
        "name-not-a-tool",
        "arguments-alone",
        "numbers",
        "bracket-text",
        "python",
        "unknown",
    ],
)
def test_cut_json_that_cannot_become_a_call_stays_text(output: str) -> None:
    splitter = CallSplitter(PLAIN, TOOLS)
    assert splitter.feed(output) == []
    assert splitter.finish(cut=True) == [("text", output)]


JSON_ANSWERS = [
    '{"answer": "Par',
    '```json\n{"summary": "The',
    '{"type": "object", "properties"',
    '[{"answer": "Par',
    '[{"answer": 1}, {"ans',
]
JSON_ANSWER_IDS = ["answer", "fenced-summary", "schema", "list", "list-after-an-answer"]


@pytest.mark.parametrize("output", JSON_ANSWERS, ids=JSON_ANSWER_IDS)
def test_a_cut_json_answer_stays_text_when_no_call_is_forced(output: str) -> None:
    """tool_choice auto: the model may answer in JSON. Cut by the limit, an object that has
    completed a key without naming an offered tool is that answer, not a call's beginning."""
    splitter = CallSplitter(PLAIN, TOOLS)
    assert splitter.feed(output) == []
    assert splitter.finish(cut=True) == [("text", output)]
    assert not splitter.dropped


@pytest.mark.parametrize(
    "output",
    [
        '{"name": "get_wea',
        '{"na',
        "{",
        "[",
        "```json\n{",
        '{"name": ',
        '{"type": "function", "function": {"name": "get_t',
        '{"tool_calls": [{"id": "c1", "ty',
        f'[{W}, {{"na',
    ],
    ids=["name", "key", "brace", "bracket", "fence", "name-key", "nested", "tool_calls", "second"],
)
def test_a_cut_json_that_can_still_name_a_tool_is_dropped(output: str) -> None:
    """tool_choice auto: a cut object whose name is a prefix of an offered tool's, or that has
    not completed a key yet, may be a call: dropped (the complete calls before it kept)."""
    splitter = CallSplitter(PLAIN, TOOLS)
    assert splitter.feed(output) == []
    segs = splitter.finish(cut=True)
    assert not text_of(segs)
    assert calls(segs) == ([WEATHER_CALL] if output.startswith(f"[{W}") else [])
    assert splitter.dropped


@pytest.mark.parametrize("output", JSON_ANSWERS[:4], ids=JSON_ANSWER_IDS[:4])
def test_a_forced_call_cut_by_the_limit_drops_any_unfinished_json(output: str) -> None:
    """tool_choice required or a named function: the grammar forces the call format, so the
    cut output can only be a call's beginning."""
    splitter = CallSplitter(PLAIN, TOOLS, forced=True)
    assert splitter.feed(output) == []
    assert splitter.finish(cut=True) == []
    assert splitter.dropped


def test_only_the_first_complete_call_of_a_cut_list_without_parallel_calls() -> None:
    splitter = CallSplitter(PLAIN, TOOLS, max_calls=1)
    splitter.feed(f"[{W}, {T}"[:-3])
    assert calls(splitter.finish(cut=True)) == [WEATHER_CALL]
    family = next(f for f in FAMILIES if f.id == "kimi_k2")
    splitter = CallSplitter(family.fmt, TOOLS, max_calls=1)
    splitter.feed(family.two[:-5])
    assert calls(splitter.finish(cut=True)) == [WEATHER_CALL]
