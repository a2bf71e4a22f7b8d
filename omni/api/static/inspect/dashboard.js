// The dashboard: the log's trends over a window (and the server's own samples of its queues
// and loaded models), polled every few seconds and drawn by uPlot (uPlot.iife.min.js, MIT,
// served from the package like every other file here).

import { api, showError } from "./common.js";

const EVERY_MS = 5000;
const filters = document.getElementById("filters");
const live = document.getElementById("live");

// Each chart: its figure, and its series as [field of the JSON, label, colour variable];
// `gaps`: a bucket may have no value (no generation ended, no sample): each is a point.
const CHARTS = [
  { id: "chart-requests", series: [["requests_per_min", "requests/min", "--accent"], ["errors_per_min", "errors/min", "--bad"]] },
  { id: "chart-tokens", series: [["input_tokens_per_s", "in tok/s", "--warn"], ["output_tokens_per_s", "out tok/s", "--accent"]] },
  { id: "chart-ttft", gaps: true, series: [["ttft_ms_p50", "p50 ms", "--accent"], ["ttft_ms_p95", "p95 ms", "--warn"]] },
  { id: "chart-decode", gaps: true, series: [["decode_tokens_per_s_p50", "p50 tok/s", "--accent"], ["decode_tokens_per_s_p95", "p95 tok/s", "--warn"]] },
  { id: "chart-queue", runtime: true, gaps: true, series: [["queued", "queued", "--warn"], ["running", "running", "--accent"]] },
  { id: "chart-loaded", runtime: true, gaps: true, series: [["loaded_models", "models", "--ok"]] },
];
const plots = new Map();

function colour(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
}

function size(figure) {
  return { width: Math.max(240, figure.clientWidth - 16), height: 180 };
}

function options(chart, figure) {
  const axis = { stroke: colour("--muted"), grid: { stroke: colour("--line"), width: 1 }, ticks: { stroke: colour("--line") } };
  return {
    ...size(figure),
    cursor: { drag: { x: false, y: false } },
    scales: { y: { range: (u, low, high) => [0, Math.max(1, high) * 1.1] } },
    axes: [axis, { ...axis, size: 56 }],
    series: [
      {},
      ...chart.series.map(([, label, name]) => ({
        label, stroke: colour(name), width: 2,
        points: chart.gaps ? { show: true, size: 5, fill: colour(name) } : { size: 4 },
        value: (u, v) => (v === null || v === undefined ? "–" : v.toFixed(v < 10 ? 2 : 0)),
      })),
    ],
  };
}

function draw(body) {
  for (const chart of CHARTS) {
    const figure = document.getElementById(chart.id);
    const from = chart.runtime ? body.runtime : body;
    const data = [body.time, ...chart.series.map(([field]) => from[field])];
    const values = data.slice(1).flat().filter((v) => v !== null);
    figure.dataset.points = String(values.length);
    figure.dataset.nonzero = String(values.filter((v) => v > 0).length);
    const plot = plots.get(chart.id);
    if (plot) plot.setData(data);
    else plots.set(chart.id, new uPlot(options(chart, figure), data, figure));
  }
}

function choices(select, values, all) {
  const chosen = select.value;
  const shown = [...new Set([...values, ...(chosen ? [chosen] : [])])].sort();
  const first = document.createElement("option");
  first.value = "";
  first.textContent = all;
  select.replaceChildren(first, ...shown.map((v) => {
    const option = document.createElement("option");
    option.value = option.textContent = v;
    return option;
  }));
  select.value = chosen;
}

function describe(body) {
  const step = body.step_s;
  document.getElementById("step").textContent = step % 60 ? `${step} s` : `${step / 60} min`;
  document.getElementById("since").textContent = `since ${new Date(body.runtime.since_ms).toLocaleString()}`;
  const now = body.runtime.loaded_now;
  // A sharded chat model says over how many ranks it runs (omni serve --ranks).
  const ranks = body.runtime.ranks;
  const sharded = ranks ? ` (chat models on ${ranks.count} ranks: ${ranks.sharding} parallel, ${ranks.backend})` : "";
  document.getElementById("loaded-now").textContent = now.length ? `· now: ${now.join(", ")}${sharded}` : "· none now";
  choices(filters.elements.model, body.models, "every model");
  // A key sees its own rows alone; a server without keys has no owners to choose from.
  const owners = filters.elements.owner;
  const mine = body.scoped_to !== null || (!body.owners.length && !owners.value);
  document.getElementById("owner-filter").hidden = mine;
  if (!mine) choices(owners, body.owners, "every key");
}

function query() {
  const params = new URLSearchParams();
  for (const [name, value] of new FormData(filters)) if (value) params.set(name, value);
  return `/inspect/api/trends?${params}`;
}

let asked = 0;  // a poll's answer is drawn only if no later poll was asked meanwhile

async function poll() {
  const mine = ++asked;
  try {
    const body = await api(query());
    if (mine !== asked) return;
    draw(body);
    describe(body);
    showError(null);
    live.textContent = `live · updated ${new Date().toLocaleTimeString()}`;
    live.className = "live on";
    document.body.dataset.state = "drawn";
  } catch (error) {
    if (mine !== asked) return;
    showError(error);
    live.textContent = "disconnected, retrying";
    live.className = "live off";
  }
}

filters.addEventListener("change", poll);
window.addEventListener("resize", () => {
  for (const chart of CHARTS) {
    plots.get(chart.id)?.setSize(size(document.getElementById(chart.id)));
  }
});
poll();
setInterval(poll, EVERY_MS);
