// Services (SPEC §13, §12.2): each service's state, pid, uptime, restarts, memory and CPU;
// Restart; the last lines of a log, read again every two seconds while the view is open; the
// MCP servers (§18.3) with their tools pinned, changed and new, a changed server flagged, the
// roles pinned of each tool's arguments (§20), and Review: a server's tools whole with each
// argument's role, which the owner may change before Trust pins them (as `bxctl mcp trust`).

import { get, post } from "./api.js";
import { $, append, bytes, clear, el, labelCells, say, span } from "./dom.js";
import { argumentsView } from "./shown.js";

const ROLES = ["target", "content", "code"];
const STATES = {
  unchanged: "pinned, unchanged",
  new: "NEW: never trusted",
  changed: "CHANGED since you trusted it",
  "roles changed": "ROLES CHANGED since you trusted it: its pinned roles hold until you trust it again",
};
const SOURCES = { proposed: "proposed", kept: "as you confirmed it", yours: "yours, now" };
let reviewing = null; // {server, tools} the owner reads, as the page was told

export function init() {
  $("#log-service").addEventListener("change", logs);
  $("#mcp-trust").addEventListener("click", trust);
}

export async function refresh() {
  await Promise.all([status(), tokens(), logs()]);
}

// The box's tokens today, against [loop] max_tokens_per_day when the owner set one (§19).
async function tokens() {
  const line = $("#tokens-today");
  try {
    const data = await get("/api/tokens");
    const spent = data.tokens.toLocaleString("en");
    if (!data.max_per_day) {
      say(line, `Tokens today (${data.day}): ${spent}.`);
      return;
    }
    const cap = data.max_per_day.toLocaleString("en");
    const reached = data.tokens >= data.max_per_day ? ": reached, no turn runs until midnight" : "";
    say(line, `Tokens today (${data.day}): ${spent} of ${cap} ([loop] max_tokens_per_day)${reached}.`);
  } catch (error) {
    say(line, `Tokens today: unknown (${error.message}).`);
  }
}

async function status() {
  try {
    const data = await get("/api/services");
    const sandbox = $("#sandbox-state");
    clear(sandbox);
    if (data.sandbox === "none") sandbox.append(el("span", { class: "unsandboxed" }, "UNSANDBOXED: tools run without bubblewrap."));
    else append(sandbox, [`Tools run in ${data.sandbox} sandboxes.`]);
    const body = clear($("#services-table tbody"));
    for (const service of data.services) {
      const up = service.state === "running" ? span((Date.now() - Date.parse(service.since)) / 1000) : "—";
      body.append(
        el("tr", {},
          el("td", { class: "mono" }, service.name),
          el("td", { class: `state ${service.state}` }, service.state + (service.last_exit ? ` (${service.last_exit})` : "")),
          el("td", {}, service.pid ?? "—"),
          el("td", {}, up),
          el("td", {}, String(service.restarts)),
          el("td", {}, bytes(service.rss)),
          el("td", {}, service.cpu_s === null ? "—" : `${service.cpu_s} s`),
          el("td", {}, el("button", { type: "button", "aria-label": `Restart ${service.name}`, onclick: () => restart(service.name) }, "Restart"))),
      );
    }
    labelCells($("#services-table"));
    mcpServers(data.mcp || []);
    matrixLine(data.matrix);
    say($("#services-problem"), "");
  } catch (error) {
    say($("#services-problem"), error.message);
  }
}

// The phone channel's state (SPEC §21.1), as `bxctl status` prints it; hidden without [matrix].
function matrixLine(matrix) {
  const line = $("#matrix-state");
  line.hidden = !matrix;
  say(line, matrix ? matrix.line : "");
  line.className = matrix && matrix.style ? `state ${matrix.style === "red" ? "failed" : "backoff"}` : "state";
}

// Each MCP server as `bxctl mcp list` shows it. A flagged one (a tool changed or new since the
// owner trusted it) is refused by brokerd until the owner trusts it again: say how.
function mcpServers(servers) {
  $("#mcp-servers").hidden = servers.length === 0;
  const body = clear($("#mcp-table tbody"));
  const flags = clear($("#mcp-flags"));
  for (const server of servers) {
    // Tools never trusted are new, not changed (issue 27).
    const why = server.changed.length ? "changed" : server.pinned ? "new tools" : "not trusted yet";
    let state = "ok";
    if (server.flagged) state = why;
    else if (server.problem) state = server.problem;
    else if (!server.listed) state = "not listed yet";
    const flag = server.flagged ? el("span", { class: "flag", role: "img", "aria-label": "flagged" }, "⚑") : null;
    body.append(
      el("tr", { class: server.flagged ? "flagged" : null },
        el("td", { class: "mono" }, flag, flag ? " " : null, server.name),
        el("td", { class: server.flagged || server.problem ? "state failed" : "state running" }, state),
        el("td", {}, String(server.running)),
        el("td", {}, String(server.pinned)),
        el("td", { class: "mono" }, server.changed.join(", ") || "—"),
        el("td", { class: "mono" }, server.new.join(", ") || "—"),
        el("td", {}, server.listed
          ? el("button", { type: "button", "aria-label": `Review ${server.name}`, onclick: () => review(server.name) }, "Review")
          : "—")),
    );
    if (server.flagged) {
      flags.append(
        el("li", { class: "flagged" },
          el("span", { class: "flag", "aria-hidden": "true" }, "⚑ "),
          el("span", { class: "mono" }, server.name),
          why === "changed" ? ": its tools changed since you trusted them: run "
            : why === "new tools" ? ": it lists tools you have not trusted: run "
            : ": its tools are not trusted yet: run ",
          el("code", {}, `bxctl mcp trust ${server.name}`), " (or Review, then Trust)"),
      );
    }
  }
  labelCells($("#mcp-table"));
  const roles = clear($("#mcp-roles"));
  for (const server of servers) {
    for (const [tool, pinned] of Object.entries(server.roles || {})) {
      const said = Object.entries(pinned).map(([argument, role]) => `${argument} ${role}`).join(", ");
      roles.append(el("li", {}, el("span", { class: "mono" }, `${server.name}/${tool}`), `: ${said || "no arguments"}`));
    }
  }
  $("#mcp-roles-title").hidden = roles.children.length === 0;
}

// A server's tools, whole, each argument with the role it would be pinned with, and a choice.
async function review(name) {
  const panel = $("#mcp-review");
  say($("#mcp-review-problem"), "");
  try {
    const data = await get(`/api/mcp/${encodeURIComponent(name)}`);
    showReview(data);
    panel.hidden = false;
    panel.focus();
  } catch (error) {
    say($("#services-problem"), error.message);
  }
}

function showReview(data) {
  reviewing = data;
  say($("#mcp-review-title"), `Tools of ${data.server}`);
  $("#mcp-trust").setAttribute("aria-label", `Trust ${data.server}`);
  const list = clear($("#mcp-review-tools"));
  for (const tool of data.tools) {
    const definition = argumentsView(JSON.stringify(tool.definition), { tabindex: "0", "aria-label": `The definition of ${tool.name}` });
    const rows = tool.roles.map((choice) => {
      const label = `Role of ${tool.name}.${choice.argument}`;
      const select = el("select", { "aria-label": label, dataset: { tool: tool.name, argument: choice.argument } },
        ROLES.map((role) => el("option", { value: role, selected: role === choice.role }, role)));
      const said = SOURCES[choice.source] + (choice.was ? `; pinned now as ${choice.was}` : "");
      return el("tr", {},
        el("th", { scope: "row", class: "mono" }, choice.argument),
        el("td", {}, select),
        el("td", {}, `${said}: ${choice.meaning}`));
    });
    const table = rows.length
      ? el("table", { class: "roles", "aria-label": `Arguments of ${tool.name}` },
        el("thead", {}, el("tr", {}, el("th", {}, "Argument"), el("th", {}, "Role"), el("th", {}, "Why"))),
        el("tbody", {}, rows))
      : el("p", { class: "quiet" }, "No arguments.");
    list.append(el("article", { class: tool.state === "unchanged" ? "tool" : "tool flagged", "aria-label": `Tool ${tool.name}` },
      el("h3", { class: "mono" }, tool.name),
      el("p", { class: "state" }, STATES[tool.state] || tool.state),
      definition.warning, definition.box, table));
  }
}

// Trust: exactly the tools the page showed (by their hashes), with the roles chosen.
async function trust() {
  if (!reviewing) return;
  const tools = Object.fromEntries(reviewing.tools.map((tool) => [tool.name, tool.sha256]));
  const roles = {};
  for (const select of document.querySelectorAll("#mcp-review-tools select")) {
    (roles[select.dataset.tool] ||= {})[select.dataset.argument] = select.value;
  }
  const problem = $("#mcp-review-problem");
  say(problem, "");
  try {
    const data = await post(`/api/mcp/${encodeURIComponent(reviewing.server)}/trust`, { tools, roles });
    showReview(data);
    say(problem, `Pinned ${data.pinned} tools of ${data.server}.`);
  } catch (error) {
    say(problem, error.message);
    if (error.status === 409) review(reviewing.server);
  }
  await status();
}

async function restart(name) {
  say($("#services-problem"), `Restarting ${name}…`);
  try {
    await post(`/api/services/${name}/restart`, {});
    say($("#services-problem"), "");
  } catch (error) {
    // gatewayd restarting itself cuts its own answer: the stream's reconnect tells the rest.
    if (name !== "gatewayd") say($("#services-problem"), error.message);
  }
  await status();
}

async function logs() {
  const name = $("#log-service").value;
  const pre = $("#log-lines");
  try {
    const data = await get(`/api/services/${name}/logs?n=100`);
    const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
    say(pre, data.lines.join("\n") || "(empty)");
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  } catch (error) {
    say(pre, error.message);
  }
}
