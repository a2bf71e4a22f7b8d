"""The OpenAI Agents SDK (`openai-agents`) runs agents against Omni: the Responses API (and
its server-side chaining), and Chat Completions.

The tiny model's text is noise, so every run forces its first call (tool_choice "required":
Omni's grammar makes the call valid JSON for the tool's parameters) and bounds every string
with `maxLength`, or a random model fills it until max_output_tokens."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx2
import pytest
from agents import (
    Agent,
    FunctionTool,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    ToolCallItem,
    ToolCallOutputItem,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from openai.types.responses import ResponseFunctionToolCall
from pydantic import BaseModel, Field

from tests.api._helpers import MODEL

CITY_MAX = 12
ARGS_DELTA = "response.function_call_arguments.delta"
FUNCTION_CALL_EVENTS = [  # one or more deltas
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    ARGS_DELTA,
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
]


class Forecast(BaseModel):
    summary: Annotated[str, Field(max_length=20)]


class Sdk:
    """An AsyncOpenAI client on the test server that keeps the path and body of every
    request."""

    def __init__(self, base_url: str, bias: dict[str, int] | None = None):
        self.bias = bias or {}
        self.paths: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        http = DefaultAsyncHttpxClient(event_hooks={"request": [self._keep]})
        self.client = AsyncOpenAI(
            base_url=f"{base_url}/v1", api_key="x", http_client=http, max_retries=0
        )

    async def _keep(self, request: httpx2.Request) -> None:
        assert request.method == "POST"
        self.paths.append(request.url.path)
        self.bodies.append(json.loads(request.content))

    def agent(self, tool: FunctionTool, *, chat: bool = False, **kwargs: Any) -> Agent[Any]:
        # After the call (tool_choice back to auto) the grammar allows an answer or another
        # call; a random model is steered to answer: towards the answer's key, away from a
        # call's. (Under tool_choice "required" only the call is allowed, whatever the bias.)
        # One call a turn: a random model allowed several would go on calling.
        settings = ModelSettings(
            tool_choice="required",
            parallel_tool_calls=False,
            max_tokens=256,
            extra_body={"logit_bias": self.bias},
        )
        model = (OpenAIChatCompletionsModel if chat else OpenAIResponsesModel)(MODEL, self.client)
        return Agent(
            name="weather",
            instructions="Answer with the weather tool.",
            tools=[tool],
            model=model,
            model_settings=settings,
            **kwargs,
        )


@pytest.fixture
async def sdk(server) -> AsyncIterator[Sdk]:  # type: ignore[no-untyped-def]
    set_tracing_disabled(True)  # traces would go to api.openai.com
    engine = server.state.engine
    bias = {str(t): 30 for t in engine.encode('"summary')}
    bias.update({str(t): -30 for t in engine.encode('"name')})
    sdk = Sdk(server.base_url, bias)
    async with sdk.client:
        yield sdk


def weather_tool(calls: list[str]) -> FunctionTool:
    @function_tool
    def get_weather(city: Annotated[str, Field(max_length=CITY_MAX)]) -> str:
        """The current weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    return get_weather


def the_call(items: list[Any], calls: list[str]) -> tuple[ResponseFunctionToolCall, str]:
    """The run's one function call and its output, for the one call the tool received."""
    assert len(calls) == 1 and len(calls[0]) <= CITY_MAX, calls
    kinds = [type(item) for item in items]
    assert kinds[:2] == [ToolCallItem, ToolCallOutputItem], kinds
    call, output = items[0].raw_item, items[1]
    assert isinstance(call, ResponseFunctionToolCall), call
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": calls[0]}
    assert output.raw_item["call_id"] == call.call_id
    assert output.output == f"sunny in {calls[0]}"
    return call, output.output


async def test_forced_call_is_the_final_output(sdk: Sdk) -> None:
    calls: list[str] = []
    agent = sdk.agent(weather_tool(calls), tool_use_behavior="stop_on_first_tool")

    result = await Runner.run(agent, "What is the weather in Paris?")

    the_call(result.new_items, calls)
    assert result.final_output == f"sunny in {calls[0]}"
    [body] = sdk.bodies
    assert sdk.paths == ["/v1/responses"]
    assert body["model"] == MODEL and body["tool_choice"] == "required"
    [tool] = body["tools"]
    assert tool["strict"] is True
    assert tool["parameters"]["properties"]["city"]["maxLength"] == CITY_MAX


async def test_streamed_run(sdk: Sdk) -> None:
    calls: list[str] = []
    agent = sdk.agent(weather_tool(calls), tool_use_behavior="stop_on_first_tool")

    result = Runner.run_streamed(agent, "What is the weather in Paris?")
    raw: list[str] = []
    named: list[str] = []
    async for event in result.stream_events():
        if event.type == "raw_response_event":
            raw.append(event.data.type)
        elif event.type == "run_item_stream_event":
            named.append(event.name)

    the_call(result.new_items, calls)
    assert result.final_output == f"sunny in {calls[0]}"
    squeezed = [t for i, t in enumerate(raw) if i == 0 or not t == raw[i - 1] == ARGS_DELTA]
    assert squeezed == FUNCTION_CALL_EVENTS, raw
    assert named == ["tool_called", "tool_output"]
    assert [b.get("stream") for b in sdk.bodies] == [True]


async def test_tool_result_goes_back_to_the_model(sdk: Sdk) -> None:
    """The default loop: the call's output goes back as input, and the next turn (tool_choice
    reset to auto) answers in the agent's output type, a schema Omni's grammar enforces."""
    calls: list[str] = []
    agent = sdk.agent(weather_tool(calls), output_type=Forecast)

    result = await Runner.run(agent, "What is the weather in Paris?")

    call, output = the_call(result.new_items, calls)
    assert isinstance(result.final_output, Forecast)
    assert len(result.final_output.summary) <= 20
    first, second = sdk.bodies
    assert first["tool_choice"] == "required" and "tool_choice" not in second
    sent = {item.get("type"): item for item in second["input"]}
    assert sent["function_call"]["call_id"] == call.call_id
    assert sent["function_call_output"] == {
        "call_id": call.call_id,
        "output": output,
        "type": "function_call_output",
    }
    assert second["text"]["format"]["type"] == "json_schema"


async def test_server_side_chaining(sdk: Sdk) -> None:
    """With auto_previous_response_id the SDK sends only new items and `previous_response_id`:
    Omni supplies the rest of the conversation from its log."""
    calls: list[str] = []
    agent = sdk.agent(weather_tool(calls), output_type=Forecast)

    first = await Runner.run(agent, "What is the weather in Paris?", auto_previous_response_id=True)
    second = await Runner.run(agent, "And in Rome?", previous_response_id=first.last_response_id)

    assert isinstance(first.final_output, Forecast) and isinstance(second.final_output, Forecast)
    assert len(calls) == 2
    ids = [r.response_id for r in (*first.raw_responses, *second.raw_responses)]
    assert [b.get("previous_response_id") for b in sdk.bodies] == [None, *ids[:3]]
    assert [len(b["input"]) for b in sdk.bodies] == [1, 1, 1, 1]  # nothing replayed


async def test_chat_completions_model(sdk: Sdk) -> None:
    calls: list[str] = []
    agent = sdk.agent(weather_tool(calls), chat=True, tool_use_behavior="stop_on_first_tool")

    result = await Runner.run(agent, "What is the weather in Paris?")

    the_call(result.new_items, calls)
    assert result.final_output == f"sunny in {calls[0]}"
    assert sdk.paths == ["/v1/chat/completions"]


async def test_a_conversation_holds_the_agent_s_turns(sdk: Sdk, server: Any) -> None:
    """With conversation_id the SDK sends only new items, naming the conversation: Omni reads
    the rest from it, and each response's turn (the call, its output, the answer) joins it."""
    calls: list[str] = []
    agent = sdk.agent(weather_tool(calls), output_type=Forecast)
    cid = (await sdk.client.conversations.create(metadata={"agent": "weather"})).id
    sdk.bodies.clear()

    first = await Runner.run(agent, "What is the weather in Paris?", conversation_id=cid)
    second = await Runner.run(agent, "And in Rome?", conversation_id=cid)

    assert isinstance(first.final_output, Forecast) and isinstance(second.final_output, Forecast)
    assert len(calls) == 2
    assert [b.get("conversation") for b in sdk.bodies] == [cid] * 4
    assert all("previous_response_id" not in b for b in sdk.bodies)
    assert [len(b["input"]) for b in sdk.bodies] == [1, 1, 1, 1]  # nothing replayed
    async with AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="x") as reader:
        items = [i async for i in reader.conversations.items.list(cid, order="asc")]
    kinds = [i.type for i in items]
    assert kinds == ["message", "function_call", "function_call_output", "message"] * 2
    responses = [r.response_id for r in (*first.raw_responses, *second.raw_responses)]
    outputs = [o.id for r in (*first.raw_responses, *second.raw_responses) for o in r.output]
    assert [items[i].id for i in (1, 3, 5, 7)] == outputs and len(set(responses)) == 4
