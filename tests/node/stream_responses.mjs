// Streams one Responses create with the official OpenAI Node SDK and prints each event's
// type, one a line, as it arrives: tests/api/test_node_sdk.py reads them.
// Usage: node stream_responses.mjs BASE_URL BODY_JSON
import OpenAI from "openai";

const [baseURL, body] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "test", maxRetries: 0 });
const stream = await client.responses.create({ ...JSON.parse(body), stream: true });
for await (const event of stream) {
  console.log(event.type);
}
