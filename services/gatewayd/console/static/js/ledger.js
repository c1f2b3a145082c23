// Ledger (SPEC §7, §12.2): the newest records, live, filtered by session and kind; Verify
// checks the whole chain and shows where it breaks, with the head the owner's side witnessed.

import { get, post } from "./api.js";
import { $, append, clear, el, labelCells, say, time } from "./dom.js";

const KINDS = ["decision", "executed", "verdict", "expired", "absorbed", "started", "recovered"];
let timer = null;

export function init() {
  const kinds = $("#ledger-kind");
  for (const kind of KINDS) kinds.append(el("option", { value: kind }, kind));
  kinds.addEventListener("change", refresh);
  $("#ledger-session").addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 300);
  });
  $("#ledger-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    refresh();
  });
  $("#verify").addEventListener("click", verify);
}

export async function refresh() {
  const query = new URLSearchParams();
  const session = $("#ledger-session").value.trim();
  const kind = $("#ledger-kind").value;
  if (session) query.set("session", session);
  if (kind) query.set("kind", kind);
  const body = $("#ledger-table tbody");
  try {
    const data = await get(`/api/ledger?${query}`);
    const before = new Set([...body.children].map((row) => row.dataset.seq));
    clear(body);
    for (const record of data.records.reverse()) {
      const row = recordRow(record);
      if (before.size && !before.has(String(record.seq))) row.classList.add("fresh");
      body.append(row);
    }
    if (!data.records.length) body.append(el("tr", {}, el("td", { colspan: "7", class: "quiet" }, "No records match.")));
  } catch (error) {
    clear(body).append(el("tr", {}, el("td", { colspan: "7", class: "problem" }, error.message)));
  }
  labelCells($("#ledger-table"));
}

function recordRow(record) {
  let what = record.tool || "";
  if (record.arguments) what = `${what} ${record.arguments}`;
  if (record.kind === "verdict") what = `${record.approve ? "approved" : "denied"} ${record.approval || ""} by ${record.by || "?"}`;
  if (record.kind === "started") what = `brokerd ${record.version || ""} (pid ${record.pid})`;
  if (record.kind === "executed") what = `${record.output_bytes ?? 0} bytes in ${record.ms ?? "?"} ms`;
  if (record.kind === "absorbed") what = `${record.child} into ${record.parent}`;
  let outcome = record.outcome || "";
  if (record.reason) outcome = `${outcome} (${record.reason})`;
  if (record.kind === "executed") outcome = record.ok ? "ok" : `failed (exit ${record.exit})`;
  return el(
    "tr",
    { dataset: { seq: String(record.seq) } },
    el("td", {}, String(record.seq)),
    el("td", { title: record.at }, time(record.at)),
    el("td", {}, record.kind),
    el("td", { class: "mono" }, record.session || record.parent || ""),
    el("td", { class: "mono" }, record.call || ""),
    el("td", { class: "mono" }, what),
    el("td", {}, outcome),
  );
}

async function verify() {
  const report = $("#verify-report");
  const button = $("#verify");
  button.disabled = true;
  say(report, "Checking every record…");
  try {
    const data = await post("/api/ledger/verify", {});
    const witnessed = data.witnessed
      ? `The head the owner's side witnessed: seq ${data.witnessed.seq}, ${data.witnessed.hash.slice(0, 16)}…`
      : "No head witnessed yet.";
    append(clear(report), [
      data.ok
        ? [el("span", { class: "ok" }, "ok"), ` — ${data.records} records, head seq ${data.head_seq} (${data.head_hash.slice(0, 16)}…). `]
        : [el("span", { class: "bad" }, "BROKEN"), ` — ${data.problem || "the chain does not hold"}. `],
      witnessed,
    ]);
  } catch (error) {
    append(clear(report), [el("span", { class: "bad" }, "Could not verify"), `: ${error.message}`]);
  } finally {
    button.disabled = false;
  }
}
