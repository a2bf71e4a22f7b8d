"""Background responses: start work, walk away, come back, resume its stream, cancel another.

The server records every event of a background response whoever is (not) listening, so a
client can poll it, or attach to its stream at any point and read on live.
"""

import time

from _client import MODEL, client

# 1. Start a background response: the call returns at once, status "queued".
job = client.responses.create(
    model=MODEL, input="Write a haiku about the sea.", background=True, max_output_tokens=48
)
print(job.id, job.status)

# 2. Attach to its stream a little later, read a few events, and hang up.
time.sleep(1)
seen = []
with client.responses.retrieve(job.id, stream=True) as stream:
    for event in stream:
        seen.append(event)
        if len(seen) == 5:
            break
print(f"read #{seen[0].sequence_number}..#{seen[-1].sequence_number}, then disconnected")

# 3. Resume after the last event seen: the rest arrives, replayed then live, with no gap.
for event in client.responses.retrieve(
    job.id, stream=True, starting_after=seen[-1].sequence_number
):
    if event.type == "response.output_text.delta":
        print(event.delta, end="", flush=True)
    last = event
print(f"\n[{last.sequence_number}] {last.type}: {last.response.status}")

# 4. Polling works too, and a finished response stays retrievable (also after a restart).
while (current := client.responses.retrieve(job.id)).status in ("queued", "in_progress"):
    time.sleep(0.5)
print("polled:", current.status, current.usage.output_tokens, "tokens")

# 5. Cancel a long background response: it stops at the next token, keeping what it wrote.
long_job = client.responses.create(
    model=MODEL, input="Count to a thousand.", background=True, max_output_tokens=2000
)
time.sleep(5)  # past the prompt, into the answer
cancelled = client.responses.cancel(long_job.id)
print(
    "cancelled:",
    cancelled.status,
    f"after {cancelled.usage.output_tokens} tokens:",
    repr(cancelled.output_text[:60]),
)
