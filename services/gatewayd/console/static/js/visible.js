// The console's one copy of bxcore/visible.py, the rule every string from outside is shown
// through (SPEC §12.2): characters that change or hide how text is drawn become escapes
// (`\x1b`, `\u202e`, `\U000e0041`). dom.js applies it to every text node the page makes, so no
// view can forget it. The rule, the reasons and the names are bxcore.visible's, case by case;
// the browser reads Unicode from its own ICU (newer than Python's), which is why unassigned
// code points are escaped on both sides (see bxcore/visible.py's docstring).
// tests/browser/test_visible_twin.py checks in Chromium that the two agree.

const HIDDEN = /^[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]$/u;
const IGNORABLE = /^\p{Default_Ignorable_Code_Point}$/u;
const MARK = /^[\p{Mn}\p{Me}]$/u;
const ALNUM = /^[A-Za-z0-9]$/;
const BLANK = 0x2800; // braille pattern blank: a "letter" that draws nothing
export const MARKS = 4; // combining marks kept on one base

const variationSelector = (code) => (code >= 0xfe00 && code <= 0xfe0f) || (code >= 0xe0100 && code <= 0xe01ef);

// For each code point of `text` (as `Array.from` splits it), why it is escaped ("hidden",
// "unbased", "stacked") or null when it is kept.
export function reasons(text, newlines = false) {
  const found = [];
  let base = null; // the code point before, when it was kept (null: start, or an escape)
  let marks = 0;
  for (const char of text) {
    const reason = reasonOf(char, base, marks, newlines);
    found.push(reason);
    if (reason !== null) {
      base = null;
      marks = 0;
    } else if (MARK.test(char)) {
      base = char;
      marks += 1;
    } else {
      base = char;
      marks = 0;
    }
  }
  return found;
}

function reasonOf(char, before, marks, newlines) {
  if (newlines && (char === "\n" || char === "\t")) return null;
  const code = char.codePointAt(0);
  if (HIDDEN.test(char) || code === BLANK) return "hidden";
  if (IGNORABLE.test(char)) {
    const rightAfterABase = before !== null && before.codePointAt(0) >= 0x80 && marks === 0;
    return variationSelector(code) && rightAfterABase ? null : "hidden";
  }
  if (MARK.test(char)) {
    if (before === null || (before.codePointAt(0) < 0x80 && !ALNUM.test(before))) return "unbased";
    if (marks >= MARKS) return "stacked";
  }
  return null;
}

export function escape(char) {
  const code = char.codePointAt(0);
  const hex = code.toString(16);
  if (code < 0x100) return `\\x${hex.padStart(2, "0")}`;
  if (code < 0x10000) return `\\u${hex.padStart(4, "0")}`;
  return `\\U${hex.padStart(8, "0")}`;
}

export function visible(text, newlines = false) {
  const chars = Array.from(text);
  const why = reasons(text, newlines);
  return chars.map((char, i) => (why[i] === null ? char : escape(char))).join("");
}

// bxcore.visible.NAMES, word for word (tests/unit/gatewayd/test_console_page.py checks it).
export const NAMES = {
  0x00: "null",
  0x07: "bell",
  0x08: "backspace",
  0x09: "tab",
  0x0a: "line feed",
  0x0d: "carriage return",
  0x1b: "escape",
  0x7f: "delete",
  0x85: "next line",
  0x9b: "control sequence introducer",
  0xad: "soft hyphen",
  0x034f: "combining grapheme joiner",
  0x061c: "arabic letter mark",
  0x115f: "hangul choseong filler",
  0x1160: "hangul jungseong filler",
  0x17b4: "khmer vowel inherent aq",
  0x17b5: "khmer vowel inherent aa",
  0x180b: "mongolian free variation selector one",
  0x180c: "mongolian free variation selector two",
  0x180d: "mongolian free variation selector three",
  0x180e: "mongolian vowel separator",
  0x180f: "mongolian free variation selector four",
  0x200b: "zero width space",
  0x200c: "zero width non-joiner",
  0x200d: "zero width joiner",
  0x200e: "left-to-right mark",
  0x200f: "right-to-left mark",
  0x2028: "line separator",
  0x2029: "paragraph separator",
  0x202a: "left-to-right embedding",
  0x202b: "right-to-left embedding",
  0x202c: "pop directional formatting",
  0x202d: "left-to-right override",
  0x202e: "right-to-left override",
  0x2060: "word joiner",
  0x2061: "function application",
  0x2062: "invisible times",
  0x2063: "invisible separator",
  0x2064: "invisible plus",
  0x2066: "left-to-right isolate",
  0x2067: "right-to-left isolate",
  0x2068: "first strong isolate",
  0x2069: "pop directional isolate",
  0x3164: "hangul filler",
  0xfeff: "zero width no-break space",
  0xffa0: "halfwidth hangul filler",
  0x2800: "braille pattern blank",
  0xe0001: "language tag",
  0xe007f: "cancel tag",
};

const KINDS = [
  [/^\p{Cc}$/u, "control character"],
  [/^\p{Cf}$/u, "format character"],
  [/^\p{Cs}$/u, "surrogate"],
  [/^\p{Co}$/u, "private-use character"],
  [/^\p{Cn}$/u, "unassigned code point"],
];

// What the owner is told of one escaped character: `right-to-left override (U+202E)`.
export function kind(char, reason) {
  return `${name(char, reason)} (${codePoint(char.codePointAt(0))})`;
}

export function codePoint(code) {
  return `U+${code.toString(16).toUpperCase().padStart(4, "0")}`;
}

// The name of one escaped character: `right-to-left override`, `tag character`.
export function name(char, reason) {
  const code = char.codePointAt(0);
  if (reason === "unbased") return "combining mark without a base";
  if (reason === "stacked") return `combining mark past ${MARKS} on one character`;
  if (code in NAMES) return NAMES[code];
  if (code >= 0xfe00 && code <= 0xfe0f) return `variation selector-${code - 0xfe00 + 1}`;
  if (code >= 0xe0100 && code <= 0xe01ef) return `variation selector-${code - 0xe0100 + 17}`;
  if (code >= 0xe0020 && code <= 0xe007e) return "tag character";
  for (const [pattern, name] of KINDS) if (pattern.test(char)) return name;
  return "invisible character";
}
