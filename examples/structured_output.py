"""Structured outputs: the answer follows a JSON schema, enforced while decoding, so even a
model too small to follow instructions returns valid JSON; the SDK parses it into a model."""

from _client import MODEL, client
from pydantic import BaseModel, Field


class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)
    founded_year: int = Field(ge=-3000, le=2100)  # bounded: a float could run on forever


parsed = client.responses.parse(
    model=MODEL, input="Describe Paris.", text_format=City, max_output_tokens=96, temperature=0
)
print("Responses:", parsed.output_parsed)

chat = client.chat.completions.parse(
    model=MODEL,
    messages=[{"role": "user", "content": "Describe Rome."}],
    response_format=City,
    max_tokens=96,
    temperature=0,
)
print("Chat:", chat.choices[0].message.parsed)
