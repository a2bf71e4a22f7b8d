// The list page: the log's objects, filtered, searched, sorted and paged, polled about once a
// second. Rows are kept by id and updated in place, so a running one changes status where it
// stands. The filters and the page live in the URL's query (replaceState): a link, or a
// reload, shows the same view.

import { api, el, ms, num, rate, showError, statusBadge } from "./common.js";

const EVERY_MS = 1000;
const TYPED_MS = 250;  // a pause in typing before the list is asked again
const FILTERS = ["q", "kind", "status", "model", "owner", "since", "until", "sort"];
const TIMES = new Set(["since", "until"]);  // ISO 8601 UTC in the URL, local in the form
const body = document.querySelector("#recent tbody");
const filters = document.getElementById("filters");
const live = document.getElementById("live");
const empty = document.getElementById("empty");
const first = document.getElementById("first");
const next = document.getElementById("next");

let cursor = null;  // the page shown (null: the first)
const previous = [];  // the cursors of the pages before it, this visit
let nextCursor = null;
let asked = 0;  // each ask numbered: an answer to an older one is dropped
let timer = null;

function created(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso ?? "–";
  const options = { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" };
  return date.toLocaleString(undefined, options);
}

function cells(row) {
  return [
    el("td", { class: "id" }, el("a", { href: `/inspect/${encodeURIComponent(row.id)}`, text: row.id })),
    el("td", { class: "kind-cell", text: row.kind }),
    el("td", { class: "nowrap", title: row.created, text: created(row.created) }),
    el("td", { class: "status-cell" }, statusBadge(row.status)),
    el("td", { class: "wrap", text: row.owner ?? "–" }),
    el("td", { class: "wrap", text: row.model ?? "–" }),
    el("td", { class: "n", text: num(row.input_tokens) }),
    el("td", { class: "n out", text: num(row.output_tokens) }),
    el("td", { class: "n", text: ms(row.ttft_ms) }),
    el("td", { class: "n", text: rate(row.tokens_per_s) }),
    el("td", { class: "preview" }, el("span", { text: row.preview ?? "", title: row.preview ?? "" })),
  ];
}

function render(rows) {
  const seen = new Map([...body.rows].map((tr) => [tr.dataset.id, tr]));
  let before = null;
  for (const row of rows) {
    let tr = seen.get(row.id);
    const state = JSON.stringify(row);
    if (!tr) {
      tr = el("tr", { "data-id": row.id });
    }
    if (tr.dataset.state !== state) {  // only what changed is rebuilt
      tr.replaceChildren(...cells(row));
      tr.dataset.state = state;
      tr.dataset.status = row.status ?? "";
    }
    seen.delete(row.id);
    const place = before ? before.nextSibling : body.firstChild;
    if (place !== tr) body.insertBefore(tr, place);
    before = tr;
  }
  for (const gone of seen.values()) gone.remove();  // deleted, or past the page
  const filtered = FILTERS.some((name) => name !== "sort" && value(name));
  empty.textContent = filtered || cursor ? "No match for these filters." : "Nothing in the log yet.";
  empty.hidden = rows.length > 0;
}

function value(name) {
  return (filters.elements[name]?.value ?? "").trim();
}

// The view as a query string: the form's filters (times as UTC) and the page's cursor.
function params() {
  const query = new URLSearchParams();
  for (const name of FILTERS) {
    let given = value(name);
    if (!given || (name === "sort" && given === "newest")) continue;
    if (TIMES.has(name)) {
      const moment = new Date(given);  // the form's local time
      if (Number.isNaN(moment.getTime())) continue;
      given = moment.toISOString();
    }
    query.set(name, given);
  }
  if (cursor) query.set("cursor", cursor);
  return query;
}

// A UTC time from the URL as a datetime-local input holds it (local, to the second).
function local(iso) {
  const moment = new Date(iso);
  if (Number.isNaN(moment.getTime())) return "";
  const shifted = new Date(moment.getTime() - moment.getTimezoneOffset() * 60000);
  return shifted.toISOString().slice(0, 19);
}

function load() {
  const query = new URLSearchParams(location.search);
  for (const name of FILTERS) {
    const given = query.get(name);
    const field = filters.elements[name];
    if (given === null || !field) continue;
    field.value = TIMES.has(name) ? local(given) : given;
  }
  cursor = query.get("cursor");
}

function remember() {
  const query = params().toString();
  history.replaceState(null, "", query ? `${location.pathname}?${query}` : location.pathname);
}

async function poll() {
  clearTimeout(timer);
  const mine = ++asked;
  const query = params();
  query.set("limit", "50");
  try {
    const page = await api(`/inspect/api/recent?${query}`);
    if (mine !== asked) return;  // the filters changed while it was asked
    render(page.data);
    nextCursor = page.next_cursor ?? null;
    next.hidden = !nextCursor;
    first.hidden = !cursor;
    first.textContent = previous.length ? "« Previous page" : "« First page";
    showError(null);
    live.textContent = `live · updated ${new Date().toLocaleTimeString()}`;
    live.className = "live on";
  } catch (error) {
    if (mine !== asked) return;
    showError(error);
    live.textContent = "reconnecting…";
    live.className = "live off";
  }
  timer = setTimeout(poll, EVERY_MS);  // after the reply: polls never pile up on a slow server
}

// The view changed: from the first page, in the URL, asked at once.
function changed() {
  cursor = null;
  previous.length = 0;
  body.replaceChildren();
  remember();
  poll();
}

function turn(to, back) {
  if (!back) previous.push(cursor);
  cursor = to;
  body.replaceChildren();
  remember();
  poll();
  window.scrollTo(0, 0);
}

let typing = null;
filters.addEventListener("input", (event) => {
  if (event.target.tagName === "SELECT") return;  // a change, below
  clearTimeout(typing);
  typing = setTimeout(changed, TYPED_MS);
});
filters.addEventListener("change", (event) => {
  if (event.target.tagName === "SELECT" || TIMES.has(event.target.name)) changed();
});
filters.addEventListener("submit", (event) => {
  event.preventDefault();
  clearTimeout(typing);
  changed();
});
filters.addEventListener("reset", () => setTimeout(changed));  // after the form has cleared
next.addEventListener("click", () => turn(nextCursor, false));
first.addEventListener("click", () => turn(previous.length ? previous.pop() : null, true));

load();
remember();
poll();
