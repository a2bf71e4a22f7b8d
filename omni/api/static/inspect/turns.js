// An object's turns: every response of its previous_response_id chain or its conversation,
// in order, each whole and linked to its page and to the turns before and after it.

import { el, statusBadge } from "./common.js";
import { itemsNode, objectLink, outputNodes } from "./render.js";

const $ = (selector) => document.querySelector(selector);

const turnAnchor = (id) => `turn-${id}`;

// A link to another turn: to it in this list, or to its page where the list does not hold it
// (a fork's other branch).
function turnLink(id, listed, text, className) {
  const href = listed.has(id) ? `#${turnAnchor(id)}` : `/inspect/${encodeURIComponent(id)}`;
  return el("a", { href, class: className, title: id, text });
}

// One turn of a chain: linked to its page, to the turns before and after it, then whole.
function turnNode(turn, n, current, listed) {
  const links = el("p", { class: "turn-links" });
  if (turn.previous) links.append("← ", turnLink(turn.previous, listed, "previous turn", "previous"), " ");
  for (const next of turn.next ?? []) {
    links.append(" ", turnLink(next, listed, listed.has(next) ? "next turn" : `next: ${next}`, "next"), " →");
  }
  return el(
    "li", { id: turnAnchor(turn.id), class: `turn${current ? " current" : ""}`, "data-turn": turn.id },
    el("p", { class: "turn-head" }, el("strong", { text: `Turn ${n}` }), " ", objectLink(turn.id), " ",
      statusBadge(turn.status), " ", el("span", { class: "muted", text: turn.model ?? "" }),
      current ? el("span", { class: "tag here", text: "this page" }) : null),
    links,
    el("div", { class: "turn-body" },
      el("div", {}, el("h4", { text: "Input" }), itemsNode(turn.input)),
      el("div", {}, el("h4", { text: "Output" }), ...outputNodes(turn))),
  );
}

function turnsNodes(turns, currentId) {
  const listed = new Set((turns ?? []).map((turn) => turn.id));
  return (turns ?? []).map((turn, i) => turnNode(turn, i + 1, turn.id === currentId, listed));
}

// The chain or conversation around this object: every turn, and links to its neighbours.
export function renderTurns(found, id) {
  const turns = found.data ?? [];
  const at = turns.findIndex((turn) => turn.id === id);
  const chained = found.chain !== "none" && turns.length > 0;
  $("#turns").hidden = !chained;
  $("#chain-nav").hidden = !chained;
  if (!chained) return;
  const what = found.chain === "conversation" ? "conversation" : "previous_response_id chain";
  $("#turns-count").textContent = `${turns.length}${found.truncated ? "+" : ""} in this ${what}`;
  $("#turns-about").replaceChildren(...(found.conversation
    ? ["The responses of conversation ", objectLink(found.conversation), ", in order."]
    : ["Each response, linked by previous_response_id, in order: its own input, then its output."]));
  $("#turns ol").replaceChildren(...turnsNodes(turns, id));
  const here = turns[at];
  $("#turn-of").replaceChildren(at >= 0
    ? el("a", { href: `#turn-${id}`, text: `turn ${at + 1} of ${turns.length}` })
    : el("a", { href: "#turns", text: `${turns.length} turns` }),
  found.conversation ? el("span", {}, " of ", objectLink(found.conversation)) : "");
  $("#previous-link").replaceChildren(...(here?.previous ? ["← previous ", objectLink(here.previous)] : []));
  $("#next-links").replaceChildren(...(here?.next ?? []).flatMap((next) => [" next → ", objectLink(next)]));
}

