// Shared by the inspector's pages: fetch with the API key, build elements, format values.
// Everything the log holds is set as text (textContent), never parsed as HTML.

const KEY = "omni.inspect.key";

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function authHeaders() {
  const key = sessionStorage.getItem(KEY);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// One key prompt at a time, however many fetches were refused together.
let asking = null;

function askKey(message) {
  if (asking) return asking;
  const box = document.getElementById("auth");
  const form = box.querySelector("form");
  const input = form.querySelector("input");
  box.querySelector(".auth-message").textContent = message;
  box.hidden = false;
  input.value = "";
  input.focus();
  asking = new Promise((resolve) => {
    form.onsubmit = (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY, input.value.trim());
      box.hidden = true;
      asking = null;
      resolve();
    };
  });
  return asking;
}

// GET a JSON path of this server; on a 401 ask for the key (kept for this tab), then retry.
export async function api(path) {
  for (;;) {
    const reply = await fetch(path, { headers: authHeaders(), cache: "no-store" });
    if (reply.status === 401) {
      const body = await reply.json().catch(() => ({}));
      const message = body.error?.message ?? "This server needs an API key.";
      await askKey(message);
      continue;
    }
    if (!reply.ok) {
      const body = await reply.json().catch(() => ({}));
      throw new HttpError(reply.status, body.error?.message ?? `HTTP ${reply.status}`);
    }
    return reply.json();
  }
}

export { askKey };

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export const RUNNING = new Set(["queued", "in_progress"]);

export function ms(value) {
  if (value === null || value === undefined) return "–";
  return value >= 10000 ? `${(value / 1000).toFixed(1)} s` : `${Math.round(value)} ms`;
}

export function rate(value) {
  return value === null || value === undefined ? "–" : `${value.toFixed(1)}/s`;
}

export function num(value) {
  return value === null || value === undefined ? "–" : String(value);
}

export function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

export function statusBadge(status) {
  return el("span", { class: `status s-${status ?? "unknown"}`, text: status ?? "unknown" });
}

export function showError(error) {
  const bar = document.getElementById("error");
  if (!bar) return;
  bar.hidden = !error;
  bar.textContent = error ? String(error.message ?? error) : "";
}

// Every page's header says which key it reads as (an admin's: every key's rows) and offers
// another one; a server without keys shows neither.
function keySwitch() {
  const header = document.querySelector("header");
  if (!header) return;
  const who = el("span", { class: "whoami" });
  const change = el("button", { type: "button", class: "key-switch", text: "Switch key", hidden: true });
  change.addEventListener("click", async () => {
    sessionStorage.removeItem(KEY);
    await askKey("The API key this tab reads with:");
    location.reload();
  });
  header.append(who, change);
  api("/inspect/api/whoami")
    .then((me) => {
      if (!me.owner) return;
      who.textContent = `key: ${me.owner}${me.admin ? " (admin: every key's rows)" : ""}`;
      change.hidden = false;
    })
    .catch(() => {});
}

keySwitch();
