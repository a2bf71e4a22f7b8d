// A request and its answer, for reading: input items with their parts (text, images, tool
// calls and results, notes), tools with their schemas, an output. Everything the log holds
// is set as text; an image is shown only from a data: URL (the page's policy loads nothing
// else), a remote one is named by its URL.

import { el } from "./common.js";

export const objectLink = (id) => el("a", { href: `/inspect/${encodeURIComponent(id)}`, class: "id", text: id });

// JSON as people read it: a string that holds JSON, indented; anything else as it is.
export function pretty(value) {
  if (typeof value === "string") {
    try {
      const parsed = JSON.parse(value);
      return parsed !== null && typeof parsed === "object" ? JSON.stringify(parsed, null, 2) : value;
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}

const block = (text, kind = "text") => el("pre", { class: kind, text: text ?? "" });

function imagePart(part) {
  const url = part.url ?? "";
  if (url.startsWith("data:image/")) {
    return el("figure", { class: "thumb" }, el("img", { src: url, alt: "an input image", loading: "lazy" }));
  }
  // Never loaded here; a link only where it is the web's.
  const named = url || (part.file_id ? `file ${part.file_id}` : "(no URL)");
  const shown = /^https?:\/\//i.test(url)
    ? el("a", { href: url, rel: "noopener noreferrer nofollow", target: "_blank", text: url })
    : el("span", { text: named });
  return el("p", { class: "image-ref" }, el("span", { class: "tag", text: "image" }), " ", shown);
}

export function callNode(call) {
  return el(
    "div", { class: "call", "data-call": call.call_id ?? "" },
    el("p", {}, el("span", { class: "tag", text: "tool call" }), " ", el("code", { class: "name", text: call.name ?? "?" }),
      call.call_id ? el("span", { class: "muted", text: ` ${call.call_id}` }) : null),
    block(pretty(call.arguments ?? ""), "json"),
  );
}

function resultPart(part) {
  return el(
    "div", { class: `result${part.is_error ? " failed" : ""}`, "data-call": part.call_id ?? "" },
    el("p", {}, el("span", { class: "tag", text: part.is_error ? "tool error" : "tool result" }),
      part.call_id ? el("span", { class: "muted", text: ` for ${part.call_id}` }) : null),
    block(pretty(part.text ?? "")),
  );
}

export function partNode(part) {
  switch (part.type) {
    case "image": return imagePart(part);
    case "tool_call": return callNode(part);
    case "tool_result": return resultPart(part);
    case "reasoning": return el("details", { class: "reasoning", open: true }, el("summary", { text: "reasoning" }), block(part.text));
    case "note": return el("p", { class: "note", text: part.text ?? "" });
    case "refusal": return el("p", { class: "refusal" }, el("span", { class: "tag", text: "refusal" }), ` ${part.text ?? ""}`);
    case "file": return el("p", { class: "note", text: part.text ?? "" });
    default: return block(part.text);
  }
}

// An input item: its role and type, then each part in order.
export function itemNode(item) {
  const parts = item.parts ?? [{ type: "text", text: item.text ?? "" }];
  const head = [item.role, item.type === "message" && item.role ? null : item.type].filter(Boolean).join(" · ");
  return el(
    "li", { class: `item role-${item.role ?? "none"}`, "data-type": item.type ?? "" },
    el("p", { class: "item-head", text: head || "input" }),
    ...parts.map(partNode),
  );
}

export function itemsNode(items) {
  return el("ol", { class: "items" }, ...(items ?? []).map(itemNode));
}

// A tool as each API writes it (Responses: flat; Chat: under `function`; Anthropic: input_schema).
export function toolNode(tool) {
  const fn = tool.function ?? tool;
  const schema = fn.parameters ?? tool.input_schema ?? null;
  return el(
    "li", { class: "tool" },
    el("p", {}, el("code", { class: "name", text: fn.name ?? tool.type ?? "tool" }),
      tool.type && tool.type !== "function" ? el("span", { class: "muted", text: ` ${tool.type}` }) : null),
    fn.description ? el("p", { class: "description", text: fn.description }) : null,
    block(pretty(schema ?? tool), "json"),
  );
}

// What an object said: its reasoning, text, tool calls, refusal, failure (those it has).
export function outputNodes(o) {
  const nodes = [];
  if (o.reasoning) nodes.push(partNode({ type: "reasoning", text: o.reasoning }));
  if (o.output_text || !(o.tool_calls ?? []).length) nodes.push(block(o.output_text ?? "", "text output-text"));
  for (const call of o.tool_calls ?? []) nodes.push(callNode(call));
  if (o.refusal) nodes.push(partNode({ type: "refusal", text: o.refusal }));
  if (o.error) nodes.push(el("p", { class: "error", text: `${o.error.code ?? "error"}: ${o.error.message}` }));
  return nodes;
}

