// Memory (SPEC §11, §12.2): the notes with their labels, and a search.

import { get } from "./api.js";
import { $, bytes, clear, el, labelBadges, labelCells, say, time } from "./dom.js";

let timer = null;

export function init() {
  $("#memory-query").addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 250);
  });
  $("#memory-form").addEventListener("submit", (event) => {
    event.preventDefault();
    refresh();
  });
}

export async function refresh() {
  const q = $("#memory-query").value.trim();
  const body = clear($("#memory-table tbody"));
  try {
    const data = await get(`/api/memory${q ? `?q=${encodeURIComponent(q)}` : ""}`);
    say($("#memory-summary"), q ? `${data.notes.length} of ${data.total} notes match.` : `${data.total} notes; the newest first.`);
    for (const note of data.notes) {
      body.append(
        el("tr", {},
          el("td", {}, `#${note.note}`),
          el("td", {}, labelBadges(note.label)),
          el("td", {}, bytes(note.bytes)),
          el("td", { title: note.created }, time(note.created)),
          el("td", { class: "mono" }, note.session),
          el("td", {}, el("div", { class: "note-text" }, note.text))),
      );
    }
    labelCells($("#memory-table"));
  } catch (error) {
    say($("#memory-summary"), error.message);
  }
}
