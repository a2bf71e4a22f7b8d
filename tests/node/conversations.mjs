// Every Conversations call of the official OpenAI Node SDK, a response in the conversation,
// the input-token count and a compaction sent back, against a real server: prints what it saw as one JSON object
// that tests/api/test_node_sdk.py reads.
// Usage: node conversations.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "test", maxRetries: 0 });
const user = (text) => ({ type: "message", role: "user", content: text });

const created = await client.conversations.create({
  items: [user("one"), user("two")],
  metadata: { topic: "numbers" },
});
const cid = created.id;
const retrieved = await client.conversations.retrieve(cid);
const updated = await client.conversations.update(cid, { metadata: { topic: "counting" } });
const added = await client.conversations.items.create(cid, { items: [user("three")] });
const body = { model, input: "Say a number.", conversation: cid };
const counted = await client.responses.inputTokens.count(body);
const response = await client.responses.create({ ...body, max_output_tokens: 3 });
const paged = [];
for await (const item of client.conversations.items.list(cid, { limit: 2, order: "asc" })) {
  paged.push(item.id);
}
const first = await client.conversations.items.retrieve(paged[0], { conversation_id: cid });
const afterDelete = await client.conversations.items.delete(paged[0], { conversation_id: cid });
const left = (await client.conversations.items.list(cid, { order: "asc" })).data.map((i) => i.id);
const deleted = await client.conversations.delete(cid);
let notFound = null;
try {
  await client.conversations.retrieve(cid);
} catch (err) {
  notFound = { status: err.status, name: err.constructor.name };
}
// max_output_tokens caps the summary (Omni's extension): quick on a random model.
const compacted = await client.responses.compact({
  model,
  input: [user("Remember: the code is 7391."), user("Noted?")],
  max_output_tokens: 4,
});
const wentOn = await client.responses.create({
  model,
  input: [...compacted.output, user("Which code?")],
  max_output_tokens: 2,
});
console.log(
  JSON.stringify({
    created, retrieved, updated, added, counted, response, paged, first, afterDelete, left,
    deleted, notFound, compacted, wentOn,
  }),
);
