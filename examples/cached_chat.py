"""The replay cache: a deterministic chat completion asked again is answered from the log.

A chat request with temperature 0, or with a seed, and the same body as one already answered and
kept (every answer but a `store=False` one; `store=True` here keeps it on a server started with
`--no-store-by-default` too) comes back at once as a copy of that answer under a new id, with the
header `x-omni-cache: hit` (`with_raw_response` lets the SDK show headers). `Cache-Control:
no-cache` generates afresh. (Against a server that answered these requests before, the first call
is a hit too.)
"""

import time

from _client import MODEL, client

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def ask(label: str, **kwargs):
    start = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=24, store=True, **kwargs
    )
    ms = (time.perf_counter() - start) * 1000
    completion = raw.parse()
    cache = raw.headers.get("x-omni-cache")
    print(f"{label:<28} x-omni-cache: {cache:<4} {ms:8.1f} ms  {completion.id}")
    return completion, cache


# 1. temperature 0: the first call generates, the second is replayed from the log.
first, _ = ask("temperature 0", temperature=0)
again, cache = ask("temperature 0, again", temperature=0)
assert cache == "hit" and again.id != first.id
assert again.choices[0].message.content == first.choices[0].message.content
print("  ", repr(first.choices[0].message.content))

# 2. A sampled request is cacheable only with a seed: the seed makes it reproducible.
ask("temperature 0.9, no seed", temperature=0.9)
_, cache = ask("temperature 0.9, no seed", temperature=0.9)
assert cache == "miss"
seeded, _ = ask("temperature 0.9, seed 7", temperature=0.9, seed=7)
replayed, cache = ask("temperature 0.9, seed 7", temperature=0.9, seed=7)
assert cache == "hit"
assert replayed.choices[0].message.content == seeded.choices[0].message.content
print("  ", repr(seeded.choices[0].message.content))

# 3. Cache-Control: no-cache bypasses the cache and generates afresh (and that fresh answer
#    is the one later hits copy).
fresh, cache = ask(
    "temperature 0, no-cache", temperature=0, extra_headers={"Cache-Control": "no-cache"}
)
assert cache == "miss" and fresh.id not in (first.id, again.id)
print(
    "  same text as before:", fresh.choices[0].message.content == first.choices[0].message.content
)
