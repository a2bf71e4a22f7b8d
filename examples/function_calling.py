"""A function-calling agent loop on the Responses API: the model calls a tool, we run it and
send the result back with previous_response_id, until the model answers in text.

With a small default model the first call is forced (tool_choice="required": the grammar makes
the call valid JSON for the tool's parameters); larger models decide for themselves."""

import json

from _client import MODEL, client

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def get_weather(city: str) -> str:
    return json.dumps({"city": city, "sky": "sunny", "celsius": 21})


response = client.responses.create(
    model=MODEL,
    input="What is the weather in Paris?",
    tools=[WEATHER],
    tool_choice="required",
    max_output_tokens=64,
)
for _ in range(4):  # a few rounds at most
    calls = [item for item in response.output if item.type == "function_call"]
    if not calls:
        break
    results = []
    for call in calls:
        print(f"model calls {call.name}({call.arguments})")
        output = get_weather(**json.loads(call.arguments))
        results.append({"type": "function_call_output", "call_id": call.call_id, "output": output})
    response = client.responses.create(
        model=MODEL,
        previous_response_id=response.id,
        input=results,
        tools=[WEATHER],
        tool_choice="none",  # answer now (a larger model may be left "auto" to call again)
        max_output_tokens=64,
    )
print("answer:", response.output_text)
