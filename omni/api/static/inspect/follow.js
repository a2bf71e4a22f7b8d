// Follows a response's public stream live: GET /v1/responses/{id}?stream=true&starting_after=N
// read with fetch (an EventSource cannot send the key), resuming after the last seq it saw
// when the connection drops, until a terminal event.

import { askKey, authHeaders } from "./common.js";

export const TERMINAL = new Set([
  "response.completed", "response.failed", "response.incomplete", "response.cancelled",
]);

function parse(block) {
  const frame = { event: "message", data: [], id: null };
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;  // a keep-alive comment
    const cut = line.indexOf(":");
    const field = cut < 0 ? line : line.slice(0, cut);
    const value = cut < 0 ? "" : line.slice(cut + 1).replace(/^ /, "");
    if (field === "event") frame.event = value;
    else if (field === "data") frame.data.push(value);
    else if (field === "id") frame.id = Number.parseInt(value, 10);
  }
  if (!frame.data.length) return null;
  return { type: frame.event, seq: frame.id, data: JSON.parse(frame.data.join("\n")) };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Calls onEvent({type, seq, data}) for each event after `after`, in order, once each;
// onState("live" | "reconnecting" | "ended" | "gone") as the connection goes.
export async function follow(id, after, onEvent, onState) {
  let last = after;
  let pause = 250;
  for (;;) {
    try {
      const url = `/v1/responses/${encodeURIComponent(id)}?stream=true&starting_after=${last}`;
      const reply = await fetch(url, {
        headers: { ...authHeaders(), Accept: "text/event-stream" }, cache: "no-store",
      });
      if (reply.status === 401) {
        await askKey("This server needs an API key.");
        continue;
      }
      if (reply.status === 404) {
        onState("gone");
        return last;
      }
      if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
      onState("live");
      const reader = reply.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = parse(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
          if (!frame || frame.type === "error") continue;  // an unread log: resume later
          if (frame.seq !== null && frame.seq <= last) continue;  // seen before a drop
          if (frame.seq !== null) last = frame.seq;
          onEvent(frame);
          if (TERMINAL.has(frame.type)) {
            reader.cancel().catch(() => {});
            onState("ended");
            return last;
          }
        }
      }
      pause = 250;  // ended without a terminal event (a server stopping): come back
    } catch (error) {
      console.warn("inspector: stream dropped", error);
    }
    onState("reconnecting");
    await sleep(pause);
    pause = Math.min(pause * 2, 4000);
  }
}
