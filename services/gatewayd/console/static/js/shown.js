// A tool call's arguments as the owner reads them (SPEC §9.1, §12.2): the twin of
// bxcore/shown_arguments.py. The JSON is parsed by our own reader (members in their order, a
// repeated key kept, numbers as written) and drawn again: pretty JSON, every key and string
// through the rule (visible.js), JSON's own escapes for `"`, `\`, newline and tab, a long run of
// one white-space character as a marker with its length, a literal ⟨ escaped. Here a string
// longer than CUT characters is also cut behind a "Show all" button that says how much it
// hides, and the card's words name what the hidden part holds too.
// tests/browser/test_visible_twin.py checks that the two draw the same text and words.

import { append, el } from "./dom.js";
import { codePoint, escape, name, reasons } from "./visible.js";

export const RUN = 16;
export const CUT = 2000;
const MOST_DEPTH = 64;
const MOST_NAMED = 8;
const BRACKET = "\u27e8";
const QUOTED = { '"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t" };
const SPACE = /^\p{Zs}$/u;
const MARK = /^[\p{Mn}\p{Me}]$/u;
const SHOW_ALL = "press Show all to read the rest before you answer.";

// --- reading JSON -------------------------------------------------------------------------

class NotJson extends Error {}

export function parseJson(text) {
  let at = 0;
  const fail = () => {
    throw new NotJson();
  };
  const ws = () => {
    while (at < text.length && " \t\n\r".includes(text[at])) at += 1;
  };
  const expect = (char) => {
    ws();
    if (text[at] !== char) fail();
    at += 1;
  };
  function string() {
    at += 1;
    let out = "";
    for (;;) {
      const char = text[at];
      if (char === undefined || char < " ") fail();
      if (char === '"') {
        at += 1;
        return out;
      }
      if (char !== "\\") {
        out += char;
        at += 1;
        continue;
      }
      const code = text[at + 1];
      const simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
      if (code in simple) {
        out += simple[code];
        at += 2;
      } else if (code === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(at + 2, at + 6))) {
        out += String.fromCharCode(parseInt(text.slice(at + 2, at + 6), 16));
        at += 6;
      } else fail();
    }
  }
  function members(closing, level, one) {
    const found = [];
    ws();
    if (text[at] === closing) {
      at += 1;
      return found;
    }
    for (;;) {
      found.push(one(level));
      ws();
      if (text[at] === ",") at += 1;
      else if (text[at] === closing) {
        at += 1;
        return found;
      } else fail();
    }
  }
  function value(level) {
    ws();
    const char = text[at];
    if (char === "{" || char === "[") {
      if (level + 1 > MOST_DEPTH) fail();
      at += 1;
      if (char === "[") return { t: "a", items: members("]", level + 1, value) };
      const pair = (inner) => {
        ws();
        if (text[at] !== '"') fail();
        const key = string();
        expect(":");
        return [key, value(inner)];
      };
      return { t: "o", pairs: members("}", level + 1, pair) };
    }
    if (char === '"') return { t: "s", v: string() };
    for (const word of ["true", "false", "null"]) {
      if (text.startsWith(word, at)) {
        at += word.length;
        return { t: "l", v: word };
      }
    }
    const number = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?/y;
    number.lastIndex = at;
    const found = number.exec(text);
    if (!found) fail();
    at = number.lastIndex;
    return { t: "n", v: found[0] };
  }
  const parsed = value(0);
  ws();
  if (at !== text.length) fail();
  return parsed;
}

// --- drawing ------------------------------------------------------------------------------

export function marker(char, count) {
  if (char === " ") return `⟨${count} spaces⟩`;
  if (char === "\t") return `⟨${count} tabs⟩`;
  return `⟨${count} × U+${char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`;
}

class Drawing {
  constructor(cut) {
    this.cut = cut; // null: nothing is cut (as bxctl draws)
    this.pieces = [];
    this.escaped = new Map(); // "name U+XXXX" -> [name, code], in the order first seen
    this.markers = new Set();
    this.bracket = false;
    this.wasCut = false; // a string was cut
  }

  add(text, what = "text", into = this.pieces) {
    const last = into[into.length - 1];
    if (what === "text" && last && last.what === "text") last.text += text;
    else if (text) into.push({ text, what });
  }

  value(node, indent, level) {
    if (node.t === "o") this.members(node.pairs, "{", "}", indent, level);
    else if (node.t === "a") this.members(node.items.map((item) => [null, item]), "[", "]", indent, level);
    else if (node.t === "s") this.string(node.v, true);
    else this.add(node.v);
  }

  members(items, opening, closing, indent, level) {
    this.add(opening);
    items.forEach(([key, item], index) => {
      if (indent === null) this.add(index ? ", " : "");
      else this.add(`${index ? "," : ""}\n${" ".repeat(indent * (level + 1))}`);
      if (key !== null) {
        this.string(key, true);
        this.add(": ");
      }
      this.value(item, indent, level + 1);
    });
    if (items.length && indent !== null) this.add(`\n${" ".repeat(indent * level)}`);
    this.add(closing);
  }

  string(text, quoted) {
    const chars = Array.from(text);
    const why = reasons(text, true);
    if (quoted) this.add('"');
    const end = this.cut === null || chars.length <= this.cut ? chars.length : cutAt(chars, why, this.cut);
    this.span(chars, why, 0, end, quoted, this.pieces);
    if (end < chars.length) {
      const rest = [];
      this.span(chars, why, end, chars.length, quoted, rest);
      this.pieces.push({ what: "more", hidden: chars.length - end, rest });
      this.wasCut = true;
    }
    if (quoted) this.add('"');
  }

  span(chars, why, from, to, quoted, into) {
    let index = from;
    while (index < to) {
      const char = chars[index];
      if (why[index] !== null) {
        const named = name(char, why[index]);
        const code = char.codePointAt(0);
        this.escaped.set(`${named} ${code}`, [named, code]);
        this.add(escape(char), "escape", into);
      } else if (char === BRACKET) {
        this.bracket = true;
        this.add(escape(char), "escape", into);
      } else if (SPACE.test(char) || (char === "\t" && !quoted)) {
        let end = index;
        while (end < to && chars[end] === char) end += 1;
        if (end - index >= RUN) {
          const shown = marker(char, end - index);
          this.markers.add(shown);
          this.add(shown, "marker", into);
        } else this.add(char.repeat(end - index), "text", into);
        index = end;
        continue;
      } else this.add(quoted ? QUOTED[char] || char : char, "text", into);
      index += 1;
    }
  }

  shown() {
    return { pieces: this.pieces, escaped: [...this.escaped.values()], markers: [...this.markers], bracket: this.bracket, cut: this.wasCut };
  }
}

// Where a long string is cut: at `cut` characters, moved on past a run of one white-space
// character and past the marks of the last base, so that each part draws as in the whole.
function cutAt(chars, why, cut) {
  let at = cut;
  while (at < chars.length && SPACE.test(chars[at]) && chars[at] === chars[at - 1]) at += 1;
  while (at < chars.length && why[at] === null && MARK.test(chars[at])) at += 1;
  return at;
}

// `arguments` (JSON text) as pretty JSON (indent null: one line), or as plain text when it is
// not JSON; `cut` as the card cuts (null: whole).
export function shownArguments(text, indent = 2, cut = null) {
  let node;
  try {
    node = parseJson(text);
  } catch (error) {
    if (!(error instanceof NotJson) && !(error instanceof RangeError)) throw error;
    return shownText(text, cut);
  }
  const drawing = new Drawing(cut);
  drawing.value(node, indent, 0);
  return drawing.shown();
}

export function shownText(text, cut = null) {
  const drawing = new Drawing(cut);
  drawing.string(text, false);
  return drawing.shown();
}

function listed(names) {
  const more = names.length - MOST_NAMED;
  return names.slice(0, MOST_NAMED).join(", ") + (more > 0 ? `, and ${more} more` : "");
}

// Every kind by its name, each with its code points: `tag character (U+E0041, U+E0042)`.
function named(escaped) {
  const codes = new Map();
  for (const [name, code] of escaped) {
    if (!codes.has(name)) codes.set(name, []);
    codes.get(name).push(codePoint(code));
  }
  return [...codes].map(([name, points]) => `${name} (${listed(points)})`).join(", ");
}

// The words a card says before its buttons (bxcore.shown_arguments.Shown.warnings).
export function warnings(shown, subject = "These arguments hold") {
  const said = [];
  if (shown.escaped.length) {
    said.push(`${subject} characters that change or hide how text is drawn, shown escaped: ${named(shown.escaped)}.`);
  }
  if (shown.markers.length) {
    said.push(`${subject} long runs of white space, each shown as a marker with its length: ${listed(shown.markers)}.`);
  }
  if (shown.bracket) said.push(`${subject} the character ⟨ (U+27E8), shown escaped: markers begin with it.`);
  return said;
}

// --- on the page --------------------------------------------------------------------------

// The pieces as nodes: escapes and markers marked out, a cut string's "Show all" button.
export function nodes(pieces, box) {
  return pieces.map((piece) => {
    if (piece.what === "text") return piece.text;
    if (piece.what !== "more") return el("span", { class: piece.what }, piece.text);
    const more = el("button", { type: "button", class: "more" }, `Show all: ${piece.hidden.toLocaleString("en")} more characters`);
    more.addEventListener("click", () => {
      more.replaceWith(append(document.createDocumentFragment(), nodes(piece.rest, box)));
      if (box.tabIndex < 0) box.tabIndex = -1;
      box.focus();
    });
    return more;
  });
}

// The arguments' box and the words before it (none when nothing was found), as a card or the
// chat draws them.
export function argumentsView(text, attributes) {
  const shown = shownArguments(text, 2, CUT);
  const box = el("pre", { class: "args", ...attributes });
  append(box, nodes(shown.pieces, box));
  const said = warnings(shown);
  if (shown.cut) said.push(`An argument is longer than ${CUT.toLocaleString("en")} characters: ${SHOW_ALL}`);
  return { box, warning: said.length ? el("p", { class: "warning", role: "note" }, said.join(" ")) : null };
}

// A write_file's difference, line by line under the same rules, each line cut as a string.
export function diffView(text, attributes) {
  const box = el("pre", { class: "diff", ...attributes });
  const found = { escaped: new Map(), markers: new Set(), bracket: false, cut: false };
  const lines = text.split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop(); // its last newline ends its last line
  for (const line of lines) {
    let kind = "";
    if (line.startsWith("+") && !line.startsWith("+++")) kind = "add";
    else if (line.startsWith("-") && !line.startsWith("---")) kind = "del";
    else if (line.startsWith("@@")) kind = "hunk";
    const shown = shownText(line, CUT);
    for (const [name, code] of shown.escaped) found.escaped.set(`${name} ${code}`, [name, code]);
    for (const shownMarker of shown.markers) found.markers.add(shownMarker);
    found.bracket ||= shown.bracket;
    found.cut ||= shown.cut;
    box.append(el("span", { class: kind }, nodes(shown.pieces, box), "\n"));
  }
  const said = warnings({ escaped: [...found.escaped.values()], markers: [...found.markers], bracket: found.bracket }, "The difference holds");
  if (found.cut) said.push(`A line of the difference is longer than ${CUT.toLocaleString("en")} characters: ${SHOW_ALL}`);
  return { box, warning: said.length ? el("p", { class: "warning", role: "note" }, said.join(" ")) : null };
}
