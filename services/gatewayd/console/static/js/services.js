// Services (SPEC §13, §12.2): each service's state, pid, uptime, restarts, memory and CPU;
// Restart; the last lines of a log, read again every two seconds while the view is open.

import { get, post } from "./api.js";
import { $, bytes, clear, el, say, span } from "./dom.js";

export function init() {
  $("#log-service").addEventListener("change", logs);
}

export async function refresh() {
  await Promise.all([status(), logs()]);
}

async function status() {
  try {
    const data = await get("/api/services");
    const sandbox = $("#sandbox-state");
    clear(sandbox);
    if (data.sandbox === "none") sandbox.append(el("span", { class: "unsandboxed" }, "UNSANDBOXED: tools run without bubblewrap."));
    else sandbox.append(`Tools run in ${data.sandbox} sandboxes.`);
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
    say($("#services-problem"), "");
  } catch (error) {
    say($("#services-problem"), error.message);
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
    pre.textContent = data.lines.join("\n") || "(empty)";
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  } catch (error) {
    pre.textContent = error.message;
  }
}
