// Chat (SPEC §12.2): the sessions, and the chosen one's conversation as it happens: owner
// messages, the agent's text, each tool call with its arguments and outcome (a waiting one with
// where each of its targets came from, as its card says), the turn's end.

import { get, post } from "./api.js";
import * as approvals from "./approvals.js";
import { $, ago, append, bytes, clear, el, labelBadges, say } from "./dom.js";
import { argumentsView } from "./shown.js";
import { targetsView } from "./targets.js";

// What the owner reads for each deny reason: bxcore.deny.denial_clause, word for word
// (tests/unit/gatewayd/test_console_page.py checks that the two agree).
export const DENIALS = {
  unknown_tool: "there is no such tool",
  invalid_arguments: "the arguments are not valid for this tool",
  no_grant: "no grant allows this call",
  denied_by_grant: "a grant forbids this call",
  flow_violation: "this session holds data that may not flow to this destination",
  owner_denied: "the owner refused this call",
  approval_expired: "the owner did not answer in time",
  audit_unavailable: "the audit log cannot be written, so nothing can run",
  protected: "this path holds boxmaker's own files, which no tool may touch",
};

const ENDINGS = {
  done: "turn ended",
  max_steps: "turn ended: it took the most steps allowed",
  error: "turn ended with an error",
  cancelled: "turn stopped by you",
  budget: "turn ended: its token budget is spent",
};

// At phone width the list shows the newest few sessions (and the chosen one), then "Show all
// N sessions": never a box of its own that scrolls inside the page (console.css).
const NEWEST_SHOWN = 5;

const state = {
  sessions: [],
  all: false, // "Show all" pressed
  current: sessionStorage.getItem("bx-session"),
  last: 0,
  busy: false,
  open: [], // tool calls of the current session still waiting for their outcome
  loading: null,
};

let sessionsTimer = null;

export function init() {
  document.addEventListener("pending-changed", showTargets);
  $("#new-session").addEventListener("click", newSession);
  $("#stop").addEventListener("click", stop);
  $("#composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("#message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
}

export async function refresh() {
  await loadSessions();
  // A page that has chosen nothing yet shows the turn that runs, if one does (the newest), and
  // never while the owner is writing a first message (it would go to that session).
  const running = state.current || $("#message").value.trim() ? null : runningSession();
  if (running) await choose(running, { quiet: true });
  else if (state.current) await choose(state.current, { quiet: true });
  else showNone();
}

// The newest session whose turn runs now, a top-level one before a sub-agent; else null.
function runningSession() {
  const busy = state.sessions.filter((s) => s.busy);
  return (busy.find((s) => !s.parent) || busy[0])?.session ?? null;
}

// A session named by a link (a job's run in the Jobs view): the list read, then that session.
export async function open(session) {
  await loadSessions();
  await choose(session);
}

async function loadSessions() {
  try {
    const data = await get("/api/sessions");
    state.sessions = data.sessions;
    renderSessions();
    if (state.current) showLabel(); // a turn may have raised the chosen session's label
  } catch (error) {
    say($("#chat-problem"), error.message);
  }
}

function loadSessionsSoon() {
  clearTimeout(sessionsTimer);
  sessionsTimer = setTimeout(loadSessions, 300);
}

function renderSessions() {
  const list = clear($("#session-list"));
  const known = new Set(state.sessions.map((s) => s.session));
  const children = new Map();
  for (const session of state.sessions) {
    const parent = session.parent && known.has(session.parent) ? session.parent : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(session);
  }
  if (state.current && !known.has(state.current)) {
    list.append(sessionItem({ session: state.current, turns: 0, busy: false, label: null }, []));
  }
  const tops = children.get(null) || [];
  tops.forEach((session, index) => {
    const item = sessionItem(session, children.get(session.session) || [], children);
    if (index >= NEWEST_SHOWN && session.session !== state.current) item.classList.add("older");
    list.append(item);
  });
  list.classList.toggle("all", state.all);
  if (list.querySelector(":scope > .older")) {
    const showAll = () => {
      state.all = true;
      list.classList.add("all");
      list.querySelector(":scope > .older button")?.focus();
    };
    list.append(el("li", { class: "show-all" }, el("button", { type: "button", onclick: showAll }, `Show all ${tops.length} sessions`)));
  }
  if (!list.children.length) {
    list.append(el("li", { class: "quiet" }, "No sessions yet. Write below to start one."));
  }
}

function sessionItem(session, subs, children = new Map()) {
  const current = session.session === state.current;
  const button = el(
    "button",
    { type: "button", "aria-current": current ? "true" : "false", onclick: () => choose(session.session) },
    el("span", { class: "id" }, session.session),
    el(
      "span",
      { class: "meta" },
      labelBadges(session.label),
      session.busy ? el("span", { class: "busy-dot" }, "● working") : null,
      session.updated ? el("span", {}, ago(session.updated)) : el("span", {}, "new"),
    ),
  );
  const item = el("li", {}, button);
  if (subs.length) {
    const nested = el("ul", { "aria-label": `Sub-agents of ${session.session}` });
    for (const sub of subs) nested.append(sessionItem(sub, children.get(sub.session) || [], children));
    item.append(nested);
  }
  return item;
}

function showNone() {
  say($("#session-title"), "No session chosen");
  clear($("#session-label"));
  say($("#session-tokens"), "");
  clear($("#events")).append(
    el("li", { class: "quiet" }, "Choose a session, or write a message to start a new one."),
  );
  setBusy(false);
}

export async function choose(session, { quiet = false } = {}) {
  const switching = session !== state.current;
  state.current = session;
  sessionStorage.setItem("bx-session", session);
  if (switching || !quiet) {
    state.last = 0;
    state.open = [];
    clear($("#events"));
  }
  renderSessions();
  say($("#session-title"), session);
  const info = showLabel();
  setBusy(Boolean(info && info.busy));
  const loading = (state.loading = loadHistory(session));
  await loading;
}

function showLabel() {
  const info = state.sessions.find((s) => s.session === state.current);
  append(clear($("#session-label")), info ? labelBadges(info.label) : []);
  const tokens = info && typeof info.tokens === "number" ? info.tokens : null;
  say($("#session-tokens"), tokens === null ? "" : `${tokens.toLocaleString("en")} tokens`);
  return info;
}

// What a turn's model answers cost, as their servers said (none said: nothing shown).
function tokensSaid(tokens) {
  return typeof tokens === "number" ? ` (${tokens.toLocaleString("en")} tokens)` : "";
}

async function loadHistory(session) {
  try {
    for (;;) {
      const data = await get(`/api/sessions/${encodeURIComponent(session)}/history?after=${state.last}`);
      if (session !== state.current) return;
      for (const event of data.events) show(event);
      if (!data.more) break;
    }
    if (!$("#events").children.length) {
      $("#events").append(el("li", { class: "quiet", dataset: { placeholder: "1" } }, "Nothing said yet."));
    }
  } catch (error) {
    if (error.status === 404) return;
    say($("#chat-problem"), error.message);
  }
}

export function onTurn(message) {
  if (message.session === state.current) show(message);
  loadSessionsSoon();
}

function show(message) {
  if (message.seq <= state.last) return;
  if (message.seq > state.last + 1) {
    // Missed some (or the history is still loading): read them from the history, in order.
    loadHistory(state.current);
    return;
  }
  state.last = message.seq;
  const list = $("#events");
  const placeholder = list.querySelector("[data-placeholder]");
  if (placeholder) placeholder.remove();
  const event = message.event;
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  switch (event.kind) {
    case "owner_message":
      setBusy(true);
      list.append(el("li", { class: "event owner" }, el("span", { class: "who" }, "You"), el("div", { class: "text" }, event.text)));
      break;
    case "assistant_text":
      list.append(el("li", { class: "event agent" }, el("span", { class: "who" }, "Agent"), el("div", { class: "text" }, event.text)));
      break;
    case "tool_called":
      list.append(toolCall(event));
      break;
    case "tool_done":
    case "tool_denied":
    case "tool_pending":
      settle(event);
      break;
    case "turn_end":
      for (const open of state.open) outcome(open.node, "failed", "no outcome");
      state.open = [];
      setBusy(false);
      list.append(el("li", { class: `event end ${event.reason}` }, (ENDINGS[event.reason] || `turn ended: ${event.reason}`) + tokensSaid(event.tokens)));
      loadSessionsSoon();
      break;
    case "error":
      list.append(el("li", { class: "event error", role: "note" }, el("span", { class: "who" }, "Error"), event.message));
      break;
    default:
      list.append(el("li", { class: "event" }, `${event.kind}`));
  }
  if (atBottom) list.scrollTop = list.scrollHeight;
}

// A tool call as the card draws its arguments (shown.js), with the same words.
function toolCall(event) {
  const args = argumentsView(event.arguments, { "aria-label": `Arguments of ${event.tool}` });
  const node = el(
    "li",
    { class: "event tool" },
    el(
      "div",
      { class: "head" },
      el("span", { class: "tool-name" }, event.tool),
      el("span", { class: "outcome running" }, "running…"),
    ),
    args.warning,
    args.box,
  );
  state.open.push({ tool: event.tool, node });
  return node;
}

function settle(event) {
  let index = state.open.findIndex((open) => open.tool === event.tool);
  let node;
  if (index < 0) {
    node = toolCall({ tool: event.tool, arguments: "" });
    $("#events").append(node);
    index = state.open.length - 1;
  }
  node = state.open[index].node;
  if (event.kind === "tool_pending") {
    const link = el("a", { href: `#approvals/${event.approval}` }, `approval ${event.approval}`);
    outcome(node, "pending", "waiting for your answer: ", link);
    node.append(el("div", { class: "targets-slot", dataset: { approval: event.approval } }));
    showTargets();
    return; // still open: its outcome comes once the owner answers
  }
  state.open.splice(index, 1);
  if (event.kind === "tool_denied") {
    outcome(node, "denied", `denied: ${DENIALS[event.reason] || event.reason}`);
    return;
  }
  const size = `${event.ok ? "done" : "failed"}, ${bytes(event.bytes)}`;
  outcome(node, event.ok ? "done" : "failed", size);
  if (typeof event.output === "string") {
    node.append(el("details", {}, el("summary", {}, "Output"), el("pre", { class: "output" }, event.output)));
  }
}

// A waiting call's targets, as its card says them, once the approvals list has the card.
function showTargets() {
  for (const slot of document.querySelectorAll("#events .targets-slot:empty")) {
    const info = approvals.info(slot.dataset.approval);
    const targets = info && targetsView(info, `Where each target of ${info.tool} came from`);
    if (targets) slot.append(targets);
  }
}

function outcome(node, kind, ...parts) {
  const slot = node.querySelector(".outcome");
  slot.className = `outcome ${kind}`;
  append(clear(slot), parts);
}

function setBusy(busy) {
  state.busy = busy;
  $("#stop").disabled = !busy;
}

function newSession() {
  const stamp = new Date().toISOString().slice(0, 10).replaceAll("-", "");
  const random = Array.from(crypto.getRandomValues(new Uint8Array(3)), (b) => b.toString(16).padStart(2, "0")).join("");
  choose(`web-${stamp}-${random}`);
  $("#message").focus();
}

async function send() {
  const box = $("#message");
  const text = box.value;
  say($("#chat-problem"), "");
  if (!text.trim()) {
    say($("#chat-problem"), "Write something first.");
    return;
  }
  if (!state.current) newSession();
  const button = $("#send");
  button.disabled = true;
  try {
    await post(`/api/sessions/${encodeURIComponent(state.current)}/messages`, { text });
    box.value = "";
    setBusy(true);
  } catch (error) {
    say($("#chat-problem"), error.message);
  } finally {
    button.disabled = false;
    box.focus();
  }
}

async function stop() {
  if (!state.current) return;
  try {
    await post(`/api/sessions/${encodeURIComponent(state.current)}/cancel`, {});
  } catch (error) {
    say($("#chat-problem"), error.message);
  }
}
