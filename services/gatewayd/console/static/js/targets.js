// Where each target of a call that asks came from (SPEC §20), as the Approvals card and the
// Chat view show it: the twin of bxctl/owner_view.py's `target_lines`, word for word. The values
// not the owner's come first, each saying which call's result it was first seen in and that
// call's tool. Every string goes through visible.js (dom.js makes every text node).

import { el } from "./dom.js";

const UNTRUSTED_ORIGIN = "untrusted: ";
const MINE = new Set(["owner", "code"]);
// bxctl.owner_view.ORIGINS_SAID, word for word (tests/unit/gatewayd/test_console_page.py).
export const ORIGINS_SAID = {
  owner: "from your message",
  job: "from the job's prompt",
  code: "code, never taken as yours",
  untrusted: "NOT FROM YOU: first seen in the result of ",
  unknown: "NOT FROM YOU: in no result the box still holds",
};

// `target` ({at, value, origin, tool?}) in the owner's words.
export function originSaid(target, job) {
  if (target.origin === "owner") return ORIGINS_SAID[job ? "job" : "owner"];
  if (target.origin === "code" || target.origin === "unknown") return ORIGINS_SAID[target.origin];
  if (target.origin.startsWith(UNTRUSTED_ORIGIN)) {
    const tool = target.tool ? ` (${target.tool})` : "";
    return `${ORIGINS_SAID.untrusted}${target.origin.slice(UNTRUSTED_ORIGIN.length)}${tool}`;
  }
  return target.origin;
}

// The list of an approval's targets, or null when it asks for another reason.
export function targetsView(info, label) {
  if (!info.targets || info.targets.length === 0) return null;
  const ordered = [...info.targets].sort((a, b) => MINE.has(a.origin) - MINE.has(b.origin));
  return el(
    "ul",
    { class: "targets", "aria-label": label },
    ordered.map((target) =>
      el(
        "li",
        { class: MINE.has(target.origin) ? "target" : "target foreign" },
        el("span", { class: "mono" }, `${target.at} = ${target.value}`),
        ": ",
        originSaid(target, info.job),
      ),
    ),
  );
}
