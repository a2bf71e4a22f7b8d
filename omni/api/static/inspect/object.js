// One response's (or chat completion's) page: what the log holds about it, and, while it
// runs, its events as they are committed (a response: its SSE stream; others: polling).

import { HttpError, RUNNING, api, el, ms, num, rate, showError, statusBadge, when } from "./common.js";
import { drawChart } from "./chart.js";
import { follow } from "./follow.js";
import { callNode, itemNode, objectLink, pretty, toolNode } from "./render.js";
import { renderTurns } from "./turns.js";

const id = decodeURIComponent(location.pathname.replace(/\/+$/, "").split("/").pop());
const path = `/inspect/api/${encodeURIComponent(id)}`;
const $ = (selector) => document.querySelector(selector);
const timeline = $("#timeline tbody");
const rows = [];  // the timeline as shown, in order

const summaryOf = (detail) => detail.summary ?? detail;
// The kinds whose stream is tokens, one delta about each: the others get no token chart.
const TOKEN_KINDS = new Set(["response", "chat.completion", "text_completion", "message", "transcription"]);

const empty = (value) => value === null || value === undefined || value === ""
  || (Array.isArray(value) && !value.length);

// name → value pairs; a value may be an element (a link), else it is shown as text.
function fill(dl, pairs) {
  dl.replaceChildren();
  for (const [name, value] of pairs) {
    if (empty(value)) continue;
    const shown = value instanceof Node ? value
      : typeof value === "object" ? JSON.stringify(value) : String(value);
    dl.append(el("dt", { text: name }), el("dd", { "data-name": name }, shown));
  }
}

const link = (id) => (id ? objectLink(id) : null);

function flat(object, prefix = "") {
  const pairs = [];
  for (const [name, value] of Object.entries(object ?? {})) {
    if (value && typeof value === "object" && !Array.isArray(value)) pairs.push(...flat(value, `${prefix}${name}.`));
    else pairs.push([`${prefix}${name}`, value]);
  }
  return pairs;
}

function setStatus(status) {
  $("#status").replaceChildren(statusBadge(status));
  document.body.dataset.status = status ?? "";
}

function renderDetail(detail) {
  const summary = summaryOf(detail);
  document.title = `${summary.id} · Omni inspector`;
  $("#object-id").textContent = summary.id;
  $("#kind").textContent = summary.kind;
  $("#model").textContent = summary.model ?? "";
  $("#created").textContent = when(summary.created);
  setStatus(summary.status);
  const t = detail.timings ?? {};
  fill($("#timings"), [
    ["model load", t.load_ms ? ms(t.load_ms) : null],
    ["queued", ms(t.queued_ms)], ["time to first token", ms(t.ttft_ms)],
    ["decode", rate(t.decode_tokens_per_s)], ["total", ms(t.total_ms)],
  ]);
  fill($("#usage"), flat(detail.usage));
  $("#tokens").hidden = !TOKEN_KINDS.has(summary.kind);
  renderRequest(detail, summary);
  renderOutput(detail);
}

function renderRequest(detail, summary) {
  const request = detail.request ?? {};
  const { input: items = [], tools = [], tool_choice, response_format, metadata, instructions, ...settings } = request;
  fill($("#request"), [
    ...flat(settings), ["tool choice", tool_choice], ...flat(metadata, "metadata."),
    ["finish reason", detail.finish_reason], ["previous response", link(detail.previous_response_id)],
    ["conversation", link(detail.conversation)], ["replay of", link(detail.replay_of)],
    ["stored", detail.store === false ? "no" : null], ["background", summary.background ? "yes" : null],
    ["key", summary.owner], ["deleted", summary.deleted ? "yes" : null],
  ]);
  $("#instructions").hidden = empty(instructions);
  $("#instructions pre").textContent = instructions ?? "";
  $("#input-count").textContent = items.length ? `${items.length} item${items.length === 1 ? "" : "s"}` : "none";
  $("#input-items").replaceChildren(...items.map(itemNode));
  $("#tools").hidden = !tools.length;
  $("#tools .muted").textContent = String(tools.length);
  $("#tools ol").replaceChildren(...tools.map(toolNode));
  $("#response-format").hidden = empty(response_format);
  $("#response-format pre").textContent = empty(response_format) ? "" : pretty(response_format);
}

function renderOutput(detail) {
  $("#output-text").textContent = detail.output_text ?? "";
  // Only calls: no empty box for a text there is none of.
  $("#output-text").hidden = !detail.output_text && (detail.tool_calls ?? []).length > 0;
  const reasoning = detail.reasoning ?? "";
  $("#reasoning").hidden = !reasoning;
  $("#reasoning pre").textContent = reasoning;
  const calls = detail.tool_calls ?? [];
  $("#tool-calls").hidden = !calls.length;
  $("#tool-calls .calls").replaceChildren(...calls.map(callNode));
  $("#refusal").hidden = !detail.refusal;
  $("#refusal").textContent = detail.refusal ? `refusal: ${detail.refusal}` : "";
  const failure = detail.error;
  $("#failure").hidden = !failure;
  $("#failure").textContent = failure ? `${failure.code ?? "error"}: ${failure.message}` : "";
}

async function loadTurns() {
  renderTurns(await api(`${path}/turns`), id);
}

function rowElement(row, start) {
  return el(
    "tr", { "data-stream": row.stream_id, "data-seq": row.seq, "data-type": row.type },
    el("td", { class: "n", text: row.seq }),
    el("td", { class: "type", text: row.type }),
    el("td", { class: "n", title: row.time, text: num(row.created_ms - start) }),
    el("td", { class: "n", text: num(row.ms_since_previous) }),
    el("td", { class: "text" }, el("span", { text: row.text ?? "" })),
  );
}

const startOf = () => (rows.length ? rows[0].created_ms : 0);

function redrawChart() {
  const own = rows.filter((row) => row.stream_id === id);
  const start = startOf();
  let n = 0;
  const points = [];
  for (const row of own) if (row.text !== null && row.text !== undefined) points.push({ t: row.created_ms - start, n: ++n });
  drawChart($("#chart"), points);
  $("#event-count").textContent = `${rows.length} events`;
}

function setTimeline(data) {
  rows.splice(0, rows.length, ...data);
  timeline.replaceChildren(...rows.map((row) => rowElement(row, startOf())));
  redrawChart();
}

// A live event off the SSE stream; its time is when it arrived here (the log's own times
// replace it once the response has ended).
function addEvent(frame) {
  const now = Date.now();
  const previous = rows.findLast((row) => row.stream_id === id);
  const delta = typeof frame.data.delta === "string" ? frame.data.delta : null;
  const row = {
    stream_id: id, seq: frame.seq, type: frame.type, time: new Date(now).toISOString(),
    created_ms: now, ms_since_previous: previous ? now - previous.created_ms : null, text: delta,
  };
  rows.push(row);
  timeline.append(rowElement(row, startOf()));
  if (frame.type === "response.output_text.delta") $("#output-text").append(delta);
  const status = frame.data.response?.status;
  if (status) setStatus(status);
  redrawChart();
}

async function load() {
  const [detail, events] = await Promise.all([api(path), api(`${path}/timeline`)]);
  renderDetail(detail);
  setTimeline(events.data);
  return detail;
}

function liveState(state) {
  const live = $("#live");
  live.textContent = {
    live: "live", reconnecting: "reconnecting…", ended: "ended", gone: "gone", missing: "not found",
  }[state] ?? state;
  live.className = `live ${state === "live" ? "on" : "off"}`;
  document.body.dataset.live = state;
}

const sleep = (wait) => new Promise((resolve) => setTimeout(resolve, wait));

async function loadUntilDone() {
  for (;;) {
    try {
      const detail = await load();
      showError(null);
      return detail;
    } catch (error) {
      if (error instanceof HttpError && error.status === 404) throw error;
      showError(error);
      await sleep(1000);
    }
  }
}

async function main() {
  let detail;
  try {
    detail = await loadUntilDone();
  } catch (error) {
    showError(error instanceof HttpError && error.status === 404 ? new Error(`Not found: ${error.message}`) : error);
    $("#object").hidden = true;
    document.body.dataset.state = "missing";
    liveState("missing");
    document.title = `${id}: not found · Omni inspector`;
    return;
  }
  try {
    await loadTurns();
    watchProgress();
    await followUntilDone(detail);
  } catch (error) {
    showError(error);  // deleted meanwhile: what was shown stays
  }
}

// A long prefill's progress is not in the object's stream: asked for each second until its
// first token, or its end.
async function watchProgress() {
  const spoke = () => rows.some((row) => row.stream_id === id && row.type.endsWith(".delta"));
  const shown = $("#progress");
  while (RUNNING.has(document.body.dataset.status) && !spoke()) {
    const said = await api(`${path}/progress`).catch(() => null);
    if (said?.fed != null && !spoke()) {
      const share = Math.floor((100 * said.fed) / said.total);
      shown.textContent = `prefill: ${said.fed.toLocaleString()} of ${said.total.toLocaleString()} prompt tokens (${share}%)`;
      shown.hidden = false;
    }
    await sleep(1000);
  }
  shown.hidden = true;
}

async function followUntilDone(detail) {
  const ran = RUNNING.has(summaryOf(detail).status);
  while (RUNNING.has(summaryOf(detail).status)) {
    if (summaryOf(detail).kind === "response") {
      const own = rows.filter((row) => row.stream_id === id);
      const after = own.length ? Math.max(...own.map((row) => row.seq)) : -1;
      // The text so far from the log's deltas, so the live ones carry on exactly after it.
      $("#output-text").textContent = own
        .filter((row) => row.type === "response.output_text.delta").map((row) => row.text).join("");
      await follow(id, after, addEvent, liveState);
    } else {
      liveState("polling");
      await sleep(1000);
    }
    detail = await loadUntilDone();
  }
  liveState("ended");
  if (ran) await loadTurns();  // its own turn's output, now whole
  document.body.dataset.state = "final";
}

main();
