"""Resume a stream with starting_after: the second connection continues exactly where the
first one stopped reading, replaying what it missed and then following live events.

Every event is in the log, so it does not matter which connection, or which process, reads it.
"""

from _client import MODEL, client

stream = client.responses.create(
    model=MODEL, input="Count from one to ten in words.", max_output_tokens=48, stream=True
)
events = iter(stream)
seen = [next(events) for _ in range(6)]  # read a little of the answer...
response_id = seen[0].response.id
last = seen[-1].sequence_number
print(f"first connection read {len(seen)} events of {response_id}, up to #{last}")

# ...and resume on a second connection from the last event seen (while generation goes on).
resumed = list(client.responses.retrieve(response_id, stream=True, starting_after=last))
stream.close()  # the first connection hangs up only now: a foreground stream stops with it
print(
    f"second connection got #{resumed[0].sequence_number} to #{resumed[-1].sequence_number}:",
    resumed[-1].type,
)

text = "".join(e.delta for e in seen + resumed if e.type == "response.output_text.delta")
final = client.responses.retrieve(response_id)
assert text == final.output_text, "the two parts join into the whole answer"
print(final.output_text)

# A full replay from the first event works too, e.g. with the SDK's stream helper.
with client.responses.stream(response_id=response_id) as replay:
    kinds = [event.type for event in replay]
print(f"full replay: {len(kinds)} events, {kinds[0]} ... {kinds[-1]}")
