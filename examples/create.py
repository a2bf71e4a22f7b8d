"""Create a response and read it back: the answer is stored in Omni's event log."""

from _client import MODEL, client

response = client.responses.create(
    model=MODEL, input="What is the capital of France?", max_output_tokens=32, temperature=0
)
print(response.id, response.status)
print(response.output_text)

again = client.responses.retrieve(response.id)
assert again.output_text == response.output_text
print("retrieved the same text; usage:", again.usage.model_dump())
