"""Resume a stream: read part of it, drop the connection, reconnect with starting_after.

Every event is in the log, so the resumed part continues exactly where the first part stopped.
"""

from _client import MODEL, client

stream = client.responses.create(
    model=MODEL, input="Count from one to ten in words.", max_output_tokens=48, stream=True
)
seen = []
for event in stream:
    seen.append(event)
    if len(seen) == 6:  # hang up early, mid-answer
        break
stream.close()
response_id = seen[0].response.id
last = seen[-1].sequence_number
print(f"read {len(seen)} events of {response_id}, last sequence_number {last}")

# A background-free foreground stream stops when its client goes away, so this replay ends
# with whatever terminal event the log holds (completed, incomplete or cancelled).
resumed = client.responses.retrieve(response_id, stream=True, starting_after=last)
for event in resumed:
    print(event.sequence_number, event.type)
    assert event.sequence_number > last

# A full replay from the start works too, with the SDK's stream helper.
with client.responses.stream(response_id=response_id) as replay:
    kinds = [event.type for event in replay]
print("full replay:", len(kinds), "events, first", kinds[0], "last", kinds[-1])
