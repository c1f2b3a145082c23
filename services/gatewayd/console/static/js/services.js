// Services (SPEC §13, §12.2): each service's state, pid, uptime, restarts, memory and CPU;
// Restart; the last lines of a log, read again every two seconds while the view is open; the
// MCP servers (§18.3) with their tools pinned, changed and new, a changed server flagged.

import { get, post } from "./api.js";
import { $, append, bytes, clear, el, say, span } from "./dom.js";

export function init() {
  $("#log-service").addEventListener("change", logs);
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
    let state = "ok";
    if (server.flagged) state = "changed";
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
        el("td", { class: "mono" }, server.new.join(", ") || "—")),
    );
    if (server.flagged) {
      flags.append(
        el("li", { class: "flagged" },
          el("span", { class: "flag", "aria-hidden": "true" }, "⚑ "),
          el("span", { class: "mono" }, server.name),
          ": its tools changed since you trusted them: run ",
          el("code", {}, `bxctl mcp trust ${server.name}`)),
      );
    }
  }
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
