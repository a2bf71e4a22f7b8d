// A small inline-SVG chart: output tokens (delta events) against ms since the first event.

import { ms } from "./common.js";

const NS = "http://www.w3.org/2000/svg";
const W = 560, H = 180, PAD = { left: 44, right: 12, top: 12, bottom: 28 };

function svg(tag, attrs, text) {
  const node = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// points: [{t: ms since start, n: tokens so far}], in time order.
export function drawChart(holder, points) {
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", class: "chart" });
  chart.append(svg("title", {}, "Output tokens over time"));
  const maxT = Math.max(1, ...points.map((p) => p.t));
  const maxN = Math.max(1, ...points.map((p) => p.n));
  const x = (t) => PAD.left + (t / maxT) * (W - PAD.left - PAD.right);
  const y = (n) => H - PAD.bottom - (n / maxN) * (H - PAD.top - PAD.bottom);
  chart.append(
    svg("line", { x1: x(0), y1: y(0), x2: x(maxT), y2: y(0), class: "axis" }),
    svg("line", { x1: x(0), y1: y(0), x2: x(0), y2: y(maxN), class: "axis" }),
    svg("text", { x: x(0), y: H - 8, class: "tick" }, "0"),
    svg("text", { x: x(maxT), y: H - 8, class: "tick end" }, ms(maxT)),
    svg("text", { x: PAD.left - 6, y: y(maxN) + 4, class: "tick end" }, String(maxN)),
    svg("text", { x: PAD.left - 6, y: y(0) + 4, class: "tick end" }, "0"),
  );
  if (points.length) {
    const line = [`${x(0)},${y(0)}`, ...points.map((p) => `${x(p.t)},${y(p.n)}`)].join(" ");
    chart.append(svg("polyline", { points: line, class: "series" }));
  }
  chart.dataset.points = String(points.length);
  holder.replaceChildren(chart);
}
