// The list page: recent responses and chat completions, polled about once a second. Rows are
// kept by id and updated in place, so a running one changes status where it stands.

import { api, el, ms, num, rate, showError, statusBadge, when } from "./common.js";

const EVERY_MS = 1000;
const body = document.querySelector("#recent tbody");
const filters = document.getElementById("filters");
const live = document.getElementById("live");

function cells(row) {
  return [
    el("td", { class: "id" }, el("a", { href: `/inspect/${encodeURIComponent(row.id)}`, text: row.id })),
    el("td", { text: row.kind }),
    el("td", { class: "nowrap", title: row.created, text: when(row.created) }),
    el("td", { class: "status-cell" }, statusBadge(row.status)),
    el("td", { class: "nowrap", text: row.model ?? "–" }),
    el("td", { class: "n", text: num(row.input_tokens) }),
    el("td", { class: "n out", text: num(row.output_tokens) }),
    el("td", { class: "n", text: ms(row.ttft_ms) }),
    el("td", { class: "n", text: rate(row.tokens_per_s) }),
    el("td", { class: "preview" }, el("span", { text: row.preview ?? "" })),
  ];
}

function render(rows) {
  const seen = new Map([...body.rows].map((tr) => [tr.dataset.id, tr]));
  let previous = null;
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
    const place = previous ? previous.nextSibling : body.firstChild;
    if (place !== tr) body.insertBefore(tr, place);
    previous = tr;
  }
  for (const gone of seen.values()) gone.remove();  // deleted, or past the limit
  document.getElementById("empty").hidden = rows.length > 0;
}

function query() {
  const params = new URLSearchParams({ limit: "50" });
  for (const [name, value] of new FormData(filters)) if (value) params.set(name, value);
  return `/inspect/api/recent?${params}`;
}

async function poll() {
  try {
    const page = await api(query());
    render(page.data);
    showError(null);
    live.textContent = `live · updated ${new Date().toLocaleTimeString()}`;
    live.className = "live on";
  } catch (error) {
    showError(error);
    live.textContent = "reconnecting…";
    live.className = "live off";
  }
  setTimeout(poll, EVERY_MS);  // after the reply: polls never pile up on a slow server
}

filters.addEventListener("change", () => body.replaceChildren());
filters.addEventListener("submit", (event) => event.preventDefault());
poll();
