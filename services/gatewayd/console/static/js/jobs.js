// Jobs (SPEC §19, §12.2): every job with its schedule, whether it is on, its next runs in the
// box's time zone and its last results from the ledger; invalid ones flagged with why; a run
// waiting for the owner's approval marked, with a link to it. **Run now** asks loopd for a run
// (its session linked in Chat, or why not); **Enable** / **Disable** rewrite the job file's
// `enabled`. Each button is described by its job's id (aria-describedby).

import { get, post } from "./api.js";
import { $, append, clear, el, labelCells, oneAtATime, say } from "./dom.js";

let zone = null;
let readFailed = false; // the problem line says why the list could not be read (not an action's)

// A change meanwhile asks for one more read after the one running.
export const refresh = oneAtATime(async () => {
  try {
    const data = await get("/api/jobs");
    zone = data.zone;
    say($("#jobs-zone"), `Times in the box's time zone, ${data.zone}.`);
    render(data.jobs);
    if (readFailed) say($("#jobs-problem"), "");
    readFailed = false;
  } catch (error) {
    say($("#jobs-problem"), error.message);
    readFailed = true;
  }
});

function render(jobs) {
  // The keyboard's place survives a new read: the same control of the same job gets it back.
  const focused = document.activeElement?.closest?.("#jobs-table [data-action]");
  const keep = focused ? [focused.dataset.job, focused.dataset.action] : null;
  const body = clear($("#jobs-table tbody"));
  for (const job of jobs) body.append(job.valid ? row(job) : invalidRow(job));
  if (!jobs.length) {
    body.append(el("tr", {}, el("td", { colspan: "6", class: "quiet" }, "No jobs. Add one with `bxctl job add` (docs/jobs.md).")));
  }
  labelCells($("#jobs-table"));
  if (keep) body.querySelector(`[data-job="${CSS.escape(keep[0])}"][data-action="${keep[1]}"]`)?.focus();
}

function idCell(job) {
  return el("th", { scope: "row", class: "mono", id: `job-${job.id}` }, job.id);
}

function invalidRow(job) {
  return el("tr", { class: "invalid" }, idCell(job), el("td", { colspan: "5" }, `INVALID: ${job.problem}`));
}

function row(job) {
  const described = `job-${job.id}`;
  const actions = el(
    "td", { class: "actions" },
    el("button", { type: "button", class: "primary", "aria-describedby": described, dataset: { job: job.id, action: "run" }, onclick: () => runNow(job.id) }, "Run now"),
    el("button", { type: "button", "aria-describedby": described, dataset: { job: job.id, action: "toggle" }, onclick: () => setEnabled(job.id, !job.enabled) }, job.enabled ? "Disable" : "Enable"),
  );
  return el(
    "tr", { class: job.waiting.length ? "waiting" : "" },
    idCell(job),
    el("td", { class: "mono" }, job.schedule ? `cron ${job.schedule}` : `every ${job.every}`),
    el("td", {}, job.enabled ? "yes" : "no"),
    el("td", {}, job.enabled ? el("ul", { class: "plain" }, job.next_runs.map((at) => el("li", {}, when(at)))) : "disabled"),
    el("td", {}, current(job), results(job.runs)),
    actions,
  );
}

// The run going on now, and the approvals it waits for.
function current(job) {
  if (!job.running) return null;
  return el(
    "p", { class: "running" },
    "Running: ", chatLink(job.running),
    job.waiting.flatMap((approval) => [" — ", el("a", { class: "flag", href: `#approvals/${approval}` }, "waits for your approval")]),
  );
}

function results(runs) {
  const ended = runs.filter((run) => run.ended);
  if (!ended.length) return el("span", { class: "quiet" }, "no run yet");
  return el("ul", { class: "plain" }, ended.map((run) => el(
    "li", {},
    `${when(run.started)} (${run.why}): `,
    el("span", { class: `how ${run.how}` }, run.how),
    `, ${run.steps} step${run.steps === 1 ? "" : "s"}`,
    run.tokens === null ? "" : `, ${run.tokens.toLocaleString("en")} tokens`,
    `, ${(run.runtime_ms / 1000).toFixed(1)} s`,
    run.detail ? ` — ${run.detail}` : "",
    " · ", chatLink(run.session),
  )));
}

function chatLink(session) {
  return el("a", { class: "mono", href: `#chat/${session}` }, session);
}

function when(iso) {
  const moment = new Date(iso);
  const format = { weekday: "short", year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" };
  try {
    return moment.toLocaleString("en-GB", { ...format, timeZone: zone || undefined });
  } catch {
    return moment.toLocaleString("en-GB", format); // a zone the browser does not know
  }
}

async function runNow(id) {
  const started = $("#jobs-started");
  say(started, "");
  say($("#jobs-problem"), "");
  try {
    const answer = await post(`/api/jobs/${encodeURIComponent(id)}/run`, {});
    append(clear(started), [`Started a run of ${id}: `, chatLink(answer.session)]);
  } catch (error) {
    say($("#jobs-problem"), `Not started: ${error.message}`);
  }
  await refresh();
}

async function setEnabled(id, enabled) {
  say($("#jobs-problem"), "");
  try {
    await post(`/api/jobs/${encodeURIComponent(id)}/enabled`, { enabled });
  } catch (error) {
    say($("#jobs-problem"), error.message);
  }
  await refresh();
}
