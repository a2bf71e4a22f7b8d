"""Calls in a model's own format, from real MLX generation: a tiny random llama with a
Hermes-style template (calls as JSON between <tool_call> markers; mlx-lm picks its json_tools
parser from the template), and one with a Qwen3-Coder-style template (calls as XML-ish
<function=...><parameter=...>; mlx-lm's qwen3_coder parser). A required call is forced in that
format by the grammar; strict tools under tool_choice auto let the model write text, or text
and then a valid call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from openai import OpenAI

from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.source import ModelSource
from omni.testing.llama import build_tiny_llama
from tests.server import serving

MODEL = "tiny-hermes"
CODER = "tiny-qwen3-coder"
HERMES = """\
{%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for tool in tools %}{{ tool | tojson }}{%- endfor %}
</tools>
For each function call, return a json object within <tool_call></tool_call> tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}<|im_start|>assistant
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
<tool_call>
{"name": "{{ tool_call.name }}", "arguments": {{ tool_call.arguments | tojson }}}
</tool_call>{%- endfor %}<|im_end|>
{% elif message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}
"""
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 10}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


QWEN3_CODER = """\
{%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for tool in tools %}{{ tool | tojson }}{%- endfor %}
</tools>
To call a function, reply in this format:
<tool_call>
<function=example_function_name>
<parameter=example_parameter>
value
</parameter>
</function>
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}<|im_start|>assistant
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
<tool_call>
<function={{ tool_call.name }}>
{%- for name, value in tool_call.arguments | items %}
<parameter={{ name }}>
{{ value }}
</parameter>
{%- endfor %}
</function>
</tool_call>{%- endfor %}<|im_end|>
{% elif message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}
"""


def _serve(folder: Any, name: str, template: str) -> Iterator[tuple[OpenAI, MLXEngine]]:
    (folder / "chat_template.jinja").write_text(template)
    engine = MLXEngine(ModelSource(str(folder), name))
    engine.start()
    try:
        with serving(engine, folder.parent / "omni.db") as client:
            yield client, engine
    finally:
        engine.close()


@pytest.fixture(scope="module")
def hermes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OpenAI, MLXEngine]]:
    folder = build_tiny_llama(tmp_path_factory.mktemp("models") / MODEL)
    yield from _serve(folder, MODEL, HERMES)


@pytest.fixture(scope="module")
def hermes_tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OpenAI, MLXEngine]]:
    """As real Qwen tokenizers have them: the call markers are added tokens, one each."""
    folder = build_tiny_llama(
        tmp_path_factory.mktemp("models") / MODEL, extra_tokens=("<tool_call>", "</tool_call>")
    )
    yield from _serve(folder, MODEL, HERMES)


@pytest.fixture(scope="module")
def coder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OpenAI, MLXEngine]]:
    folder = build_tiny_llama(tmp_path_factory.mktemp("models") / CODER)
    yield from _serve(folder, CODER, QWEN3_CODER)


def test_the_model_format_is_found(hermes: Any) -> None:
    _, engine = hermes
    assert engine.supports_tools
    assert (engine.tool_format.start, engine.tool_format.end) == ("<tool_call>", "</tool_call>")


@pytest.mark.parametrize(("served", "model"), [("hermes", MODEL), ("coder", CODER)])
def test_a_required_call_is_forced_in_the_models_own_format(
    request: pytest.FixtureRequest, served: str, model: str
) -> None:
    """The call is read by the model's own parser (json_tools, qwen3_coder): had the grammar
    forced another format, that parser would find no call, and the output would be text."""
    client, _ = request.getfixturevalue(served)
    response = client.responses.create(
        model=model,
        input="Weather?",
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=200,
    )
    (call,) = response.output
    assert call.type == "function_call" and call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])


def test_parallel_required_calls_are_each_valid(hermes: Any) -> None:
    """With parallel_tool_calls (the default) the grammar lets the model go on calling; a
    random model may, until max_output_tokens cuts the last call, which stays text."""
    client, _ = hermes
    response = client.responses.create(
        model=MODEL,
        input="Weather?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=120,
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    rest = response.output[len(calls) :]
    assert not rest or (response.status == "incomplete" and [i.type for i in rest] == ["message"])
    assert len({call.call_id for call in calls}) == len(calls)


def test_strict_tools_under_auto_leave_text_free(hermes: Any) -> None:
    """The random model writes text; the grammar (text without the marker, or text then one
    valid call) lets it. Which calls the grammar accepts: tests/runtime/test_grammar_choices.py."""
    client, _ = hermes
    plain = client.responses.create(
        model=MODEL, input="Weather?", tools=[WEATHER], max_output_tokens=8
    )
    assert plain.output[0].type == "message"
    assert "<tool_call>" not in plain.output_text


# --- a family whose calls are not JSON: Qwen3-Coder --------------------------------------------


def test_the_qwen3_coder_format_is_found(coder: Any) -> None:
    _, engine = coder
    assert engine.tool_format.family == "qwen3_coder"


def test_a_named_call_streams_on_chat_in_qwen3_coders_format(coder: Any) -> None:
    client, _ = coder
    chunks = list(
        client.chat.completions.create(
            model=CODER,
            messages=[{"role": "user", "content": "Weather?"}],
            tools=[
                {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
            ],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            max_tokens=200,
            stream=True,
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert calls and calls[0].function.name == "get_weather"
    arguments = "".join(tc.function.arguments or "" for tc in calls if tc.index == 0)
    jsonschema.validate(json.loads(arguments), WEATHER["parameters"])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert not "".join(d.content or "" for d in deltas)  # no markup leaks as text


# --- markers that are tokens (as in real tokenizers) -------------------------------------------


@pytest.mark.parametrize("parallel", [False, True])
def test_a_required_call_with_marker_tokens_end_to_end(hermes_tokens: Any, parallel: bool) -> None:
    """The grammar writes the markers as the tokens they are; the engine's text carries
    them; the splitter reads the call: no marker leaks, every call is valid."""
    client, engine = hermes_tokens
    assert engine.tool_format.start == "<tool_call>"
    response = client.responses.create(
        model=MODEL,
        input="Weather?",
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=parallel,
        max_output_tokens=120,
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and (parallel or len(calls) == 1)
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    assert "<tool_call>" not in response.output_text
