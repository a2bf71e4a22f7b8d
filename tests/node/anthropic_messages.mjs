// One Messages API round with the official Anthropic Node SDK: a create, the same request
// streamed (its text events and finalMessage()), a token count, and an unknown model's
// NotFoundError. Prints what it saw as one JSON object: tests/api/test_node_sdk.py reads it.
// Usage: node anthropic_messages.mjs BASE_URL MODEL
import Anthropic from "@anthropic-ai/sdk";

const [baseURL, model] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey: "test", maxRetries: 0 });
const body = {
  model,
  max_tokens: 6,
  temperature: 0,
  system: "Be brief.",
  messages: [{ role: "user", content: "Say hello." }],
};

const created = await client.messages.create(body);

const stream = client.messages.stream(body);
const events = [];
let text = "";
stream.on("streamEvent", (event) => events.push(event.type));
stream.on("text", (delta) => {
  text += delta;
});
const final = await stream.finalMessage();

const counted = await client.messages.countTokens({
  model,
  system: body.system,
  messages: body.messages,
});

let notFound = null;
try {
  await client.messages.create({ ...body, model: "no-such-model" });
} catch (err) {
  if (!(err instanceof Anthropic.NotFoundError)) throw err;
  notFound = { status: err.status, body: err.error };
}

console.log(JSON.stringify({ created, final, text, events, counted, notFound }));
