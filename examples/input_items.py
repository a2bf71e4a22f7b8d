"""Page through a response's input items, newest first and oldest first."""

from _client import MODEL, client

response = client.responses.create(
    model=MODEL,
    instructions="Answer briefly.",
    input=[
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": "What is 2 + 2?"},
    ],
    max_output_tokens=16,
)

page = client.responses.input_items.list(response.id, limit=2)
print("newest first, first page:", [(item.id, item.role) for item in page.data], page.has_more)

for item in client.responses.input_items.list(response.id, order="asc", limit=2):
    print("oldest first:", item.id, item.role, item.content[0].text)
