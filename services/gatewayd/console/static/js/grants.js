// Grants (SPEC §5, §12.2): every grant, the invalid ones with why; Add grant (checked by
// brokerd with the same code as `bxctl grant add`), Remove (asks first), and Explain.

import { del, get, post } from "./api.js";
import { $, append, clear, el, labelBadges, labelCells, say } from "./dom.js";

export function init() {
  $("#grant-form").addEventListener("submit", add);
  $("#explain-form").addEventListener("submit", explain);
}

export async function refresh() {
  try {
    const data = await get("/api/grants");
    render(data.grants);
    say($("#grants-problem"), "");
  } catch (error) {
    say($("#grants-problem"), error.message);
  }
}

function render(grants) {
  const body = clear($("#grants-table tbody"));
  for (const grant of grants) {
    const remove = el("button", { type: "button", class: "danger", "aria-label": `Remove ${grant.id}`, onclick: () => removeGrant(grant.id) }, "Remove");
    if (!grant.valid) {
      body.append(
        el("tr", { class: "invalid" },
          el("td", { class: "mono" }, grant.id),
          el("td", { colspan: "6" }, `INVALID: ${grant.problem}`),
          el("td", {}, remove)),
      );
      continue;
    }
    body.append(
      el("tr", {},
        el("td", { class: "mono" }, grant.id),
        el("td", { class: "mono" }, grant.tool),
        el("td", {}, grant.mode),
        el("td", { class: "mono" }, scope(grant)),
        el("td", {}, labelBadges({ class: grant.class, untrusted: false })),
        el("td", {}, grant.untrusted ? "yes" : "no"),
        el("td", {}, grant.note || ""),
        el("td", {}, remove)),
    );
  }
  if (!grants.length) body.append(el("tr", {}, el("td", { colspan: "8", class: "quiet" }, "No grants: the agent may do nothing. Add one below.")));
  labelCells($("#grants-table"));
}

// What a grant covers beyond its tool: its path (and a shell's read-only binding) or host;
// an MCP grant's kind and [match], as `bxctl grant list` shows them.
function scope(grant) {
  if (grant.kind) {
    const match = grant.match && grant.match.length ? ` match ${grant.match.join(", ")}` : "";
    return `${grant.kind}${match}`;
  }
  const place = grant.path || grant.host || "(any)";
  return grant.write === false ? `${place} (read-only)` : place;
}

function lines(text) {
  const found = text.split("\n").map((line) => line.trim()).filter(Boolean);
  return found.length ? found : null;
}

async function add(event) {
  event.preventDefault();
  const form = event.target;
  const data = new FormData(form);
  const untrusted = data.get("untrusted");
  const grant = {
    id: data.get("id").trim(),
    tool: data.get("tool").trim(),
    mode: data.get("mode"),
    class: data.get("class"),
    path: data.get("path").trim() || null,
    host: data.get("host").trim() || null,
    untrusted: untrusted === "" ? null : untrusted === "true",
    note: data.get("note").trim() || null,
    write: data.get("write") === "false" ? false : null,
    kind: data.get("kind") || null,
    match: lines(data.get("match")),
  };
  const problem = $("#grant-form-problem");
  say(problem, "");
  try {
    const answer = await post("/api/grants", grant);
    render(answer.grants);
    form.reset();
    say(problem, "");
    form.querySelector("input").focus();
  } catch (error) {
    say(problem, `Not added: ${error.message.replace(/^not added: /, "")}`);
  }
}

async function removeGrant(id) {
  if (!window.confirm(`Remove the grant ${id}? brokerd stops using it at once.`)) return;
  try {
    const answer = await del(`/api/grants/${encodeURIComponent(id)}`);
    render(answer.grants);
    say($("#grants-problem"), "");
  } catch (error) {
    say($("#grants-problem"), error.message);
  }
}

async function explain(event) {
  event.preventDefault();
  const data = new FormData(event.target);
  const out = $("#explanation");
  say(out, "Asking brokerd…");
  try {
    const answer = await post("/api/explain", {
      session: data.get("session").trim(),
      tool: data.get("tool").trim(),
      arguments: data.get("arguments"),
    });
    const verdict = answer.verdict === "denied" ? `denied (${answer.reason})` : answer.verdict;
    append(clear(out), [
      el("p", {}, el("strong", {}, `brokerd would answer: ${verdict}`), answer.winner ? ` — grant ${answer.winner}` : "", " ", labelBadges(answer.label)),
      el("ol", {}, answer.steps.map((step) => el("li", {}, step))),
    ]);
  } catch (error) {
    say(out, error.message);
  }
}
