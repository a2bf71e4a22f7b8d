"""Calls in a model's own format, from real MLX generation: a tiny random llama with a
Hermes-style template (calls as JSON between <tool_call> markers; mlx-lm picks its json_tools
parser from the template). A required call is forced in that format by the grammar; strict
tools under tool_choice auto let the model write text, or text and then a valid call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from openai import OpenAI

from omni.api.app import Settings
from omni.engine.mlx_engine import MLXEngine
from omni.engine.model_source import ModelSource
from omni.engine.tiny import build_tiny_llama
from tests.server import ServerThread

MODEL = "tiny-hermes"
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


@pytest.fixture(scope="module")
def hermes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OpenAI, MLXEngine]]:
    folder = build_tiny_llama(tmp_path_factory.mktemp("models") / MODEL)
    (folder / "chat_template.jinja").write_text(HERMES)
    engine = MLXEngine(ModelSource(str(folder), MODEL))
    engine.start()
    db = tmp_path_factory.mktemp("db") / "omni.db"
    srv = ServerThread(Settings(db_path=str(db), keepalive=1.0), engine).start()
    client = OpenAI(base_url=f"{srv.base_url}/v1", api_key="t", max_retries=0)
    try:
        yield client, engine
    finally:
        client.close()
        srv.stop()
        engine.close()


def test_the_model_format_is_found(hermes: Any) -> None:
    _, engine = hermes
    assert engine.supports_tools
    assert (engine.tool_format.start, engine.tool_format.end) == ("<tool_call>", "</tool_call>")


def test_a_required_call_is_forced_in_the_models_own_format(hermes: Any) -> None:
    client, _ = hermes
    response = client.responses.create(
        model=MODEL,
        input="Weather?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=200,
    )
    (call,) = response.output
    assert call.type == "function_call" and call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])


def test_strict_tools_under_auto_leave_text_free(hermes: Any) -> None:
    """The random model writes text; the grammar (text without the marker, or text then one
    valid call) lets it. Which calls the grammar accepts: tests/engine/test_grammar_choices.py."""
    client, _ = hermes
    plain = client.responses.create(
        model=MODEL, input="Weather?", tools=[WEATHER], max_output_tokens=8
    )
    assert plain.output[0].type == "message"
    assert "<tool_call>" not in plain.output_text
