// The console page (SPEC §12): logging in with the link's token, the views, and the one live
// stream every view listens to. The token is read from the address's fragment, taken out of
// the address bar at once, and sent only in the body of POST /api/login, whose key this tab
// then sends on every request (`api.js`); without a key the page only says how to log in.

import { key, keyed, loggedOut, login, whenLoggedOut } from "./api.js";
import { listen as listenTo } from "./events.js";
import { $, say } from "./dom.js";
import * as approvals from "./approvals.js";
import * as chat from "./chat.js";
import * as grants from "./grants.js";
import * as jobs from "./jobs.js";
import * as ledger from "./ledger.js";
import * as memory from "./memory.js";
import * as services from "./services.js";

const VIEWS = { chat, approvals, ledger, grants, memory, services, jobs };
const LIVE_EVERY_MS = { services: 2000 };
let current = null;
let stream = null;
let poll = null;

async function start() {
  const token = takeToken();
  if (token !== null) {
    try {
      await login(token);
    } catch (error) {
      showLogin(error.message);
      return;
    }
  } else if (key() === null) {
    showLogin("");
    return;
  }
  let loggedIn = true;
  whenLoggedOut(() => {
    loggedIn = false;
    showLogin("Open the link that `bxctl console` prints on the box to log in.");
  });
  for (const view of Object.values(VIEWS)) view.init?.(countChanged);
  await approvals.refresh(); // says its own problems; a 401 shows the login
  if (!loggedIn) return;
  window.addEventListener("hashchange", route);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refreshCurrent();
  });
  listen();
  route();
}

function takeToken() {
  const match = /^#token=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!match && !location.hash.startsWith("#token=")) return null;
  // Out of the address bar (and its history entry) before anything else happens.
  history.replaceState(null, "", `${location.pathname}#chat`);
  return match ? match[1] : "";
}

function showLogin(problem) {
  for (const section of document.querySelectorAll(".view")) section.hidden = true;
  $("#login").hidden = false;
  say($("#login-problem"), problem || "");
  if (stream) stream.close();
  document.title = "boxmaker";
}

function route() {
  const [name, detail] = (location.hash.slice(1) || "chat").split("/");
  const view = VIEWS[name] ? name : "chat";
  const changed = view !== current;
  current = view;
  for (const [key] of Object.entries(VIEWS)) {
    $(`#view-${key}`).hidden = key !== view;
    const link = document.querySelector(`nav a[data-view="${key}"]`);
    if (key === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  clearInterval(poll);
  if (LIVE_EVERY_MS[view]) poll = setInterval(() => VIEWS[view].refresh(), LIVE_EVERY_MS[view]);
  // `#chat/SESSION` (a job's run linked from Jobs) opens that session.
  const ready = view === "chat" && detail ? chat.open(detail) : VIEWS[view].refresh();
  if (view === "approvals" && detail) ready.then(() => approvals.focus(detail));
  if (changed && document.activeElement?.closest("nav")) {
    // A link followed from the keyboard: the view's heading is where reading goes on.
    $("#main").focus({ preventScroll: true });
  }
}

function refreshCurrent() {
  if (current) VIEWS[current].refresh();
  approvals.refresh();
}

function countChanged(count) {
  document.title = count ? `(${count}) boxmaker` : "boxmaker";
  const badge = $("#pending-count");
  badge.hidden = count === 0;
  badge.textContent = String(count);
  badge.setAttribute("aria-label", `${count} pending`);
}

function listen() {
  const linkState = $("#link-state");
  const live = () => {
    linkState.textContent = "live";
    linkState.classList.remove("down");
  };
  const pendingChanged = () => {
    approvals.refresh();
    if (current === "jobs") jobs.refresh(); // a job's run may wait, or wait no more
  };
  const handlers = {
    hello: live,
    reset: () => {
      live();
      refreshCurrent();
    },
    turn: (data) => chat.onTurn(JSON.parse(data)),
    approval_requested: pendingChanged,
    approval_settled: pendingChanged,
    ledger: () => {
      if (current === "ledger") ledger.refresh();
      if (current === "jobs") jobs.refresh(); // job_started, job_ended
    },
  };
  stream = listenTo("/api/events", {
    headers: keyed,
    on: (name, data) => {
      if (Object.hasOwn(handlers, name)) handlers[name](data);
    },
    down: () => {
      linkState.textContent = "reconnecting…";
      linkState.classList.add("down");
    },
    refused: loggedOut,
  });
}

start();
