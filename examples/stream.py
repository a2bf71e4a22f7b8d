"""Stream a response event by event, then continue the conversation with previous_response_id."""

from _client import MODEL, client

stream = client.responses.create(
    model=MODEL, input="Name three colours.", max_output_tokens=48, temperature=0, stream=True
)
response_id = None
for event in stream:
    if event.type == "response.created":
        response_id = event.response.id
    elif event.type == "response.output_text.delta":
        print(event.delta, end="", flush=True)
    elif event.type in ("response.completed", "response.incomplete"):
        print(f"\n[{event.sequence_number}] {event.type}")

follow_up = client.responses.create(
    model=MODEL,
    previous_response_id=response_id,
    input="Which of them is the colour of the sky?",
    max_output_tokens=32,
    temperature=0,
)
print(follow_up.output_text)
