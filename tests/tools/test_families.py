"""Calls forced in a model family's own format (Qwen3-Coder's XML, GLM's arg_key/arg_value,
MiniMax's invoke, Kimi's sections, Mistral's [ARGS], LFM2's Python calls), not as plain JSON:
what each grammar accepts, and that what a model writes under it reads back through mlx-lm's
own parser as a call whose arguments are valid for the tool."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_tokenizer

from omni.ports.chat import ToolFormat
from omni.runtime.chat.constraints import Constraints
from omni.testing.llama import build_tiny_llama
from omni.tools.calls import CallSplitter
from omni.tools.families import CALL_FAMILIES, family_tools

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"type": "string", "enum": ["C", "F"]},
                "alerts": {"type": "boolean"},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            # bounded: a random model seldom writes a closing tag of itself
            "properties": {"zone": {"type": "string", "maxLength": 10}},
            "required": ["zone"],
            "additionalProperties": False,  # else a random model adds keys without end
        },
    },
}
TOOLS = [WEATHER, TIME]

# What each family writes for get_weather(city="Paris", days=3): accepted as written.
ONE_CALL = {
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    "glm47": "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
    "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
    "laguna": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
    "minimax_m2": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
    '</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>',
    "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city":"Paris","days":3}<|tool_call_end|>'
    "<|tool_calls_section_end|>",
    "mistral": '[TOOL_CALLS]get_weather[ARGS]{"city":"Paris","days":3}',
    "pythonic": '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>',
}
FAMILIES = sorted(CALL_FAMILIES)


def parser(family: str) -> ToolFormat:
    module = importlib.import_module(f"mlx_lm.tool_parsers.{family}")
    return ToolFormat(module.tool_call_start, module.tool_call_end or None, module.parse_tool_call)


def spec(family: str, required: bool = True, repeat: bool = False) -> dict[str, Any]:
    listed = family_tools(family, TOOLS)
    assert listed is not None
    return {
        "type": "family_call",
        "family": family,
        "tools": listed,
        "required": required,
        "repeat": repeat,
    }


# Real models' tokenizers hold their call markers as added tokens (one token each), which
# llguidance never matches by spelling: every test runs with the markers spelled out and
# with them as tokens.
MARKERS = tuple(
    sorted(
        {
            "<tool_call>",
            "</tool_call>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "<minimax:tool_call>",
            "</minimax:tool_call>",
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
            "<|tool_call_end|>",
            "<|tool_call_argument_begin|>",
            "[TOOL_CALLS]",
            "[ARGS]",
            "<|tool_call_start|>",
        }
    )
)


@pytest.fixture(scope="module", params=["spelled", "tokens"])
def model_dir(request: Any, tiny_model_dir: Path, tmp_path_factory: Any) -> Path:
    if request.param == "spelled":
        return tiny_model_dir
    return build_tiny_llama(tmp_path_factory.mktemp("models") / "marked", extra_tokens=MARKERS)


@pytest.fixture(scope="module")
def constraints(model_dir: Path) -> Constraints:
    tokenizer = load_tokenizer(model_dir)
    made = Constraints(tokenizer)
    made.hf = tokenizer  # type: ignore[attr-defined]
    return made


def accepts(constraints: Constraints, grammar: dict[str, Any], text: str) -> bool:
    """Whether the grammar accepts `text` as the model's tokenizer writes it (markers as
    the tokens they are)."""
    matcher = constraints._compiled(grammar).deep_copy()
    tokens = constraints.hf.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    return bool(matcher.consume_tokens(tokens)) and matcher.is_accepting()


def test_every_family_has_a_recorded_call() -> None:
    assert set(ONE_CALL) == set(CALL_FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_familys_own_call_is_accepted_and_reads_back(
    constraints: Constraints, family: str
) -> None:
    text = ONE_CALL[family]
    assert accepts(constraints, spec(family), text)
    splitter = CallSplitter(parser(family), TOOLS)
    [(kind, call)] = splitter.feed(text) + splitter.finish()  # type: ignore[misc]
    assert kind == "call" and call.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.arguments) == {"city": "Paris", "days": 3}  # type: ignore[union-attr]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_call_missing_a_required_parameter_is_refused(
    constraints: Constraints, family: str
) -> None:
    text = ONE_CALL[family]
    broken = {
        "qwen3_coder": text.replace("<parameter=days>\n3\n</parameter>\n", ""),
        "glm47": text.replace("<arg_key>days</arg_key><arg_value>3</arg_value>", ""),
        "laguna": text.replace("<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n", ""),
        "minimax_m2": text.replace('<parameter name="days">3</parameter>\n', ""),
        "kimi_k2": text.replace(',"days":3', ""),
        "mistral": text.replace(',"days":3', ""),
        "pythonic": text.replace(", days=3", ""),
    }[family]
    assert broken != text
    assert not accepts(constraints, spec(family), broken)


@pytest.mark.parametrize("family", ["qwen3_coder", "glm47", "minimax_m2"])
def test_key_value_values_keep_their_types(constraints: Constraints, family: str) -> None:
    text = ONE_CALL[family]
    assert not accepts(
        constraints, spec(family), text.replace(">3<", ">three<").replace("\n3\n", "\nthree\n")
    )
    assert not accepts(
        constraints, spec(family), text.replace(">3<", ">9<").replace("\n3\n", "\n9\n")
    )
    assert not accepts(constraints, spec(family), text.replace("Paris", "Parisparisparis"))


@pytest.mark.parametrize("family", FAMILIES)
def test_text_before_the_call_only_when_not_required(constraints: Constraints, family: str) -> None:
    text = "Let me check." + ONE_CALL[family]
    assert not accepts(constraints, spec(family, required=True), text)
    assert accepts(constraints, spec(family, required=False), text)
    assert accepts(constraints, spec(family, required=False), "It is sunny.")


TIME_CALL = {
    "qwen3_coder": "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n"
    "</function>\n</tool_call>",
    "glm47": "<tool_call>get_time<arg_key>zone</arg_key><arg_value>UTC</arg_value></tool_call>",
    "laguna": "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>UTC</arg_value>\n"
    "</tool_call>",
    "mistral": '[TOOL_CALLS]get_time[ARGS]{"zone":"UTC"}',
}
TWO_CALLS = {
    "qwen3_coder": ONE_CALL["qwen3_coder"] + "\n" + TIME_CALL["qwen3_coder"],
    "glm47": ONE_CALL["glm47"] + TIME_CALL["glm47"],
    "laguna": ONE_CALL["laguna"] + "\n" + TIME_CALL["laguna"],
    "mistral": ONE_CALL["mistral"] + TIME_CALL["mistral"],
    "pythonic": ONE_CALL["pythonic"].replace(")]", '), get_time(zone="UTC")]'),
    "minimax_m2": ONE_CALL["minimax_m2"].replace(
        "</invoke>\n",
        '</invoke>\n<invoke name="get_time">\n<parameter name="zone">UTC</parameter>\n</invoke>\n',
    ),
    "kimi_k2": ONE_CALL["kimi_k2"].replace(
        "<|tool_call_end|>",
        "<|tool_call_end|><|tool_call_begin|>functions.get_time:1"
        '<|tool_call_argument_begin|>{"zone":"UTC"}<|tool_call_end|>',
    ),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_several_calls_only_when_parallel(constraints: Constraints, family: str) -> None:
    text = TWO_CALLS[family]
    assert accepts(constraints, spec(family, repeat=True), text)
    assert not accepts(constraints, spec(family, repeat=False), text)
    splitter = CallSplitter(parser(family), TOOLS)
    segments = splitter.feed(text) + splitter.finish()
    assert [seg[1].name for seg in segments if seg[0] == "call"] == ["get_weather", "get_time"]  # type: ignore[union-attr]


def test_key_value_formats_refuse_what_they_cannot_carry() -> None:
    coded = {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}}
    either = {"x": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}
    for properties in (coded, either):
        tool = {
            "type": "function",
            "function": {"name": "f", "parameters": {"type": "object", "properties": properties}},
        }
        assert family_tools("qwen3_coder", [tool]) is None  # forced as plain JSON instead
        assert family_tools("mistral", [tool]) is not None  # JSON arguments hold anything


# --- what a (random) model writes under each grammar reads back as valid calls --------------


class EndAfter:
    """The grammar's processor, and an end after `n` calls: at once where the output is then
    complete, else (calls inside one section) by forcing the section's close, then EOS."""

    def __init__(self, grammar: Any, family: str, n: int, tokenizer: Any, vocab: int):
        self.grammar, self.n, self.tokenizer = grammar, n, tokenizer
        self.fam = CALL_FAMILIES[family]
        self.complete = 0
        self.forced: list[int] | None = None
        self.vocab = vocab
        self.eos = tokenizer.eos_token_id
        ending = self.fam.section_close + self.fam.close
        self.close = tokenizer.encode(ending, add_special_tokens=False)
        self.could_close = False

    def _only(self, token: int) -> mx.array:
        return mx.where(mx.arange(self.vocab) == token, 0.0, -mx.inf)[None]

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        logits = self.grammar(tokens, logits)
        matcher = self.grammar.matcher
        if self.forced is not None:
            return self._only(self.forced.pop(0) if self.forced else self.eos)
        if not self.fam.section:
            if matcher.is_accepting():
                self.complete += 1
                if self.complete >= self.n:
                    return self._only(self.eos)
            return logits
        # Inside a section: a call has just ended when the section may close now.
        can_close = matcher.validate_tokens(self.close) == len(self.close)
        if can_close and not self.could_close:
            self.complete += 1
        self.could_close = can_close
        if can_close and self.complete >= self.n:
            self.forced = list(self.close)
            return self._only(self.forced.pop(0))
        return logits


@pytest.fixture(scope="module")
def model(model_dir: Path) -> Any:
    return load(str(model_dir))[0]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("repeat", [False, True])
def test_sampled_calls_parse_with_mlx_lms_parser_and_fit_the_schema(
    constraints: Constraints, model: Any, model_dir: Path, family: str, repeat: bool
) -> None:
    grammar = spec(family, required=True, repeat=repeat)
    eos = constraints.eos[0]
    tokenizer = load_tokenizer(model_dir)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for seed in range(4):
        processor = constraints.processor(grammar)
        mx.random.seed(seed)
        prompt = mx.array([1, 2, 3 + seed])
        out: list[int] = []
        for token, _ in generate_step(
            prompt,
            model,
            max_tokens=400,
            sampler=lambda logp: mx.random.categorical(logp),
            # a random model would go on calling: it ends after two calls
            logits_processors=[EndAfter(processor, family, 2, tokenizer, model.args.vocab_size)],
        ):
            if int(token) == eos:
                break
            out.append(int(token))
        assert processor.matcher.is_stopped() or processor.matcher.is_accepting(), out
        text = (
            constraints.tokenizer.decode_str(out)
            if hasattr(constraints.tokenizer, "decode_str")
            else None
        )
        assert text is not None
        splitter = CallSplitter(parser(family), TOOLS)
        segments = splitter.feed(text) + splitter.finish()
        calls = [seg[1] for seg in segments if seg[0] == "call"]
        assert calls and all(seg[0] == "call" or not seg[1].strip() for seg in segments), text
        if not repeat:
            assert len(calls) == 1, text
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), schemas[call.name])  # type: ignore[union-attr]


# --- what a format cannot carry, or its parser would read back otherwise ----------------------


def _tool(**properties: Any) -> list[dict[str, Any]]:
    params = {"type": "object", "properties": properties, "required": list(properties)}
    return [{"type": "function", "function": {"name": "f", "parameters": params}}]


@pytest.mark.parametrize(
    "properties",
    [
        {"s": {"type": ["string", "null"]}},  # a list of types
        {"s": {"type": "string", "maxLength": 300}},  # too long a bound for a raw string
        {"my key": {"type": "string"}},  # a key the parser splits
        {"s": {"type": "string", "enum": ["null", "auto"]}},  # read back as None
        {"s": {"type": "string", "enum": ["a</parameter>b"]}},  # holds a stop
    ],
)
def test_what_qwen3_coder_cannot_carry_falls_back_to_plain_json(properties: Any) -> None:
    assert family_tools("qwen3_coder", _tool(**properties)) is None


def test_a_tool_name_the_parsers_cut_falls_back_to_plain_json() -> None:
    tools = _tool(s={"type": "string"})
    tools[0]["function"]["name"] = "get.weather"
    assert family_tools("mistral", tools) is None


def _call(family: str, value: str) -> str:
    return {
        "qwen3_coder": f"<tool_call>\n<function=f>\n<parameter=s>\n{value}\n</parameter>\n"
        "</function>\n</tool_call>",
        "glm47": f"<tool_call>f<arg_key>s</arg_key><arg_value>{value}</arg_value></tool_call>",
        "minimax_m2": f'<minimax:tool_call>\n<invoke name="f">\n<parameter name="s">{value}'
        "</parameter>\n</invoke>\n</minimax:tool_call>",
    }[family]


@pytest.mark.parametrize(
    ("family", "value", "ok"),
    [
        ("qwen3_coder", "a b", True),
        ("qwen3_coder", "a</parameter>b", False),  # the parser would end the value there
        ("qwen3_coder", "x</tool_call>y", False),  # ... or the call
        ("qwen3_coder", "null", False),  # read back as None
        ("qwen3_coder", " pad ", True),  # kept as written
        ("glm47", " pad ", False),  # glm's parser strips values
        ("glm47", "a</arg_value>b", False),
        ("minimax_m2", "a</invoke>b", False),
        ("minimax_m2", " null", False),
        ("minimax_m2", "a b", True),
    ],
)
def test_raw_strings_read_back_as_written(
    constraints: Constraints, family: str, value: str, ok: bool
) -> None:
    tools = _tool(s={"type": "string"})
    grammar = {"type": "family_call", "family": family, "tools": family_tools(family, tools)}
    text = _call(family, value)
    assert accepts(constraints, {**grammar, "required": True}, text) is ok
    if ok:
        splitter = CallSplitter(parser(family), tools)
        [(_, call)] = splitter.feed(text) + splitter.finish()
        assert json.loads(call.arguments) == {"s": value}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kind", "value", "ok"),
    [
        ("integer", "9007199254740991", True),
        ("integer", "12345678901234567891", False),  # float() would change it
        ("number", "1.5", True),
        ("number", "1e400", False),  # float() overflows
    ],
)
def test_numbers_stay_in_what_the_parser_reads_exactly(
    constraints: Constraints, kind: str, value: str, ok: bool
) -> None:
    tools = _tool(s={"type": kind})
    grammar = {"type": "family_call", "family": "qwen3_coder", "required": True}
    grammar["tools"] = family_tools("qwen3_coder", tools)
    assert accepts(constraints, grammar, _call("qwen3_coder", value)) is ok


@pytest.mark.parametrize("required", [True, False])
def test_json_calls_between_markers_work_with_markers_as_tokens(
    constraints: Constraints, required: bool
) -> None:
    grammar = {
        "type": "native_call",
        "start": "<tool_call>",
        "end": "</tool_call>",
        "schema": {"type": "object"},
        "required": required,
    }
    call = '<tool_call>\n{"name":"f","arguments":{}}\n</tool_call>'
    assert accepts(constraints, grammar, call)
    assert accepts(constraints, grammar, "Let me see." + call) is not required
    assert accepts(constraints, grammar, "It is sunny.") is not required


def test_pythonic_optional_parameters_are_joined_by_commas(constraints: Constraints) -> None:
    grammar = spec("pythonic")
    start, end = "<|tool_call_start|>[get_weather(", ")]<|tool_call_end|>"
    assert accepts(constraints, grammar, f'{start}city="Rome", days=2, unit="C"{end}')
    assert accepts(constraints, grammar, f'{start}city="Rome", days=2, alerts=true{end}')
    assert not accepts(constraints, grammar, f'{start}city="Rome", days=2, {end}')  # dangling
    assert not accepts(constraints, grammar, f'{start}city="Rome" days=2{end}')  # no comma
    assert not accepts(constraints, grammar, f'{start}, city="Rome", days=2{end}')


def test_pythonic_names_must_be_python_identifiers() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"from": {"type": "string"}}}}}]  # fmt: skip
    assert family_tools("pythonic", tools) is None  # a keyword is no keyword argument
    tools[0]["function"]["parameters"]["properties"] = {"x": {"type": "string"}}
    tools[0]["function"]["name"] = "get-weather"
    assert family_tools("pythonic", tools) is None
    tools[0]["function"]["name"] = "get_weather"
    assert family_tools("pythonic", tools) is not None


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "object", "properties": {"x": {"type": "string"}}},  # JSON inside the tags
        {"type": "array", "items": {"type": "string"}},
        {"type": "integer", "minimum": 10**16},  # bounds past what parsers read exactly
        {"type": "number", "maximum": -1e16},
    ],
)
def test_key_value_formats_leave_these_to_plain_json(prop: dict[str, Any]) -> None:
    tools = _tool(s=prop)
    assert family_tools("qwen3_coder", tools) is None
    if prop["type"] in ("object", "array"):  # Python call syntax holds them as literals
        assert family_tools("pythonic", tools) is not None


def test_a_stripping_parser_gets_no_edge_its_strip_would_eat(constraints: Constraints) -> None:
    tools = _tool(s={"type": "string"})
    grammar = {"type": "family_call", "family": "glm47", "required": True}
    grammar["tools"] = family_tools("glm47", tools)
    assert not accepts(constraints, grammar, _call("glm47", "\x1fa"))
    assert accepts(constraints, grammar, _call("glm47", "a\x1fb"))
