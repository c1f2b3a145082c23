// Approvals (SPEC §9, §12.2): each pending call as a card with every argument in full, the
// write_file difference, where each target came from (§20), the time left, and the owner's three
// answers. A card settled
// anywhere (the CLI, another page) leaves this page as soon as the stream says so. The
// arguments and the difference are drawn by shown.js: escaped where invisible, wrapped, a long
// value behind "Show all", and the card's words before its buttons name what was found.

import { get, post } from "./api.js";
import { $, append, el, labelBadges, oneAtATime, say, span } from "./dom.js";
import { argumentsView, diffView } from "./shown.js";
import { targetsView } from "./targets.js";

const UNTRUSTED = "the session holds untrusted content";
let pending = [];
let onCount = () => {};

export function init(countChanged) {
  onCount = countChanged;
  setInterval(tick, 1000);
}

export function count() {
  return pending.length;
}

// A pending approval as brokerd last told (the Chat view shows its targets), or undefined.
export function info(approval) {
  return pending.find((a) => a.approval === approval);
}

// A change meanwhile asks for one more read after the one running.
export const refresh = oneAtATime(async () => {
  try {
    const data = await get("/api/pending");
    pending = data.approvals.sort((a, b) => a.requested.localeCompare(b.requested));
    say($("#approvals-problem"), "");
  } catch (error) {
    say($("#approvals-problem"), error.message);
  }
  render();
});

export function focus(approval) {
  const card = document.getElementById(`approval-${approval}`);
  if (!card) return;
  card.scrollIntoView({ block: "center" });
  card.classList.add("flash");
  setTimeout(() => card.classList.remove("flash"), 1500);
  firstAnswer(card)?.focus();
}

// Where the keyboard goes on a card: the first "Show all" while part of it is hidden, else
// Approve.
function firstAnswer(card) {
  return card.querySelector("button.more") || card.querySelector(".actions button");
}

function render() {
  const list = $("#cards");
  const shown = new Map([...list.children].map((card) => [card.dataset.approval, card]));
  const wanted = new Set(pending.map((a) => a.approval));
  for (const [id, card] of shown) if (!wanted.has(id)) card.remove();
  for (const info of pending) if (!shown.has(info.approval)) list.append(card(info));
  $("#approvals-empty").hidden = pending.length > 0;
  onCount(pending.length);
  tick();
  document.dispatchEvent(new CustomEvent("pending-changed"));
}

function card(info) {
  const title = `${info.tool} in ${info.session}`;
  const headingId = `approval-${info.approval}-title`;
  const node = el(
    "li",
    { class: info.job ? "card from-job" : "card", id: `approval-${info.approval}`, dataset: { approval: info.approval, expires: info.expires }, "aria-labelledby": headingId },
    el("h2", { id: headingId }, el("span", {}, info.tool), labelBadges(info.label)),
    // A job's run asks while nobody watches it: the card says so before anything else.
    info.job ? el("p", { class: "job-note" }, `From a scheduled job: ${info.job}`) : null,
    el(
      "dl",
      {},
      el("dt", {}, "Session"), el("dd", { class: "mono" }, info.session),
      el("dt", {}, "Grant"), el("dd", { class: "mono" }, info.grant),
      ...(info.write === undefined || info.write === null ? [] : [
        el("dt", {}, "Folder"), el("dd", {}, info.write ? "read-write" : "read-only"),
      ]),
      ...(info.job ? [el("dt", {}, "Job"), el("dd", {}, info.job)] : []),
      el("dt", {}, "Why you are asked"), el("dd", {}, info.why),
      el("dt", {}, "Approval"), el("dd", { class: "mono" }, info.approval),
      el("dt", {}, "Time left"), el("dd", { class: "left" }, "…"),
    ),
  );
  const targets = targetsView(info, `Where each target of ${title} came from`);
  if (targets) append(node, [el("h3", {}, "Where each target came from"), targets]);
  node.append(el("h3", { class: "visually-hidden" }, "Arguments"));
  const warningId = `approval-${info.approval}-warning`;
  const args = argumentsView(info.arguments, { tabindex: "0", "aria-label": `Every argument of ${title}` });
  const diff = info.tool !== "write_file" ? null
    : info.preview ? diffView(info.preview, { tabindex: "0", "aria-label": "What would change in the file" })
    : { box: el("p", { class: "quiet" }, "No preview: the file could not be read."), warning: null };
  const words = [args.warning, diff && diff.warning].filter(Boolean);
  const warning = words.length ? el("div", { class: "warnings", id: warningId }, words) : null;
  append(node, [warning, args.box, diff && diff.box]);
  if (warning) args.box.setAttribute("aria-describedby", warningId);
  const problem = el("p", { class: "problem", role: "alert" });
  const answer = (approve, scope) => () => verdict(node, info, approve, scope, problem);
  const actions = el(
    "div",
    { class: "actions" },
    el("button", { type: "button", class: "primary", "aria-describedby": warning ? warningId : null, onclick: answer(true, "once") }, "Approve"),
    info.why === UNTRUSTED
      ? null
      : el("button", { type: "button", "aria-describedby": warning ? warningId : null, onclick: answer(true, "session") }, "Approve for session"),
    el("button", { type: "button", class: "danger", onclick: answer(false, "once") }, "Deny"),
  );
  append(node, [actions, problem]);
  return node;
}

async function verdict(node, info, approve, scope, problem) {
  for (const button of node.querySelectorAll("button")) button.disabled = true;
  say(problem, "");
  try {
    await post(`/api/approvals/${info.approval}`, { approve, scope });
    pending = pending.filter((a) => a.approval !== info.approval);
    const next = node.nextElementSibling || node.previousElementSibling;
    node.remove();
    render();
    const button = next && firstAnswer(next);
    (button || $("#approvals-title")).focus?.();
  } catch (error) {
    say(problem, error.message);
    if (error.status === 404 || error.status === 409) {
      refresh();
      return;
    }
    for (const button of node.querySelectorAll("button")) button.disabled = false;
  }
}

function tick() {
  const now = Date.now();
  for (const card of document.querySelectorAll("#cards .card")) {
    const left = (Date.parse(card.dataset.expires) - now) / 1000;
    const slot = card.querySelector(".left");
    if (!slot) continue;
    say(slot, left > 0 ? span(left) : "expired");
    slot.classList.toggle("soon", left < 60);
  }
}

