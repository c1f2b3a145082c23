// Building the page's nodes. Every piece of text is a text node: nothing the agent, a tool,
// a grant file or a log says is ever parsed as HTML (SPEC §12.2). No HTML parsing sink is used here.
// And this is the one place the page makes text nodes (`append`, `say`) and the attributes a
// person reads (`el`'s aria-label, title, placeholder): each goes through the rule of
// visible.js, bxcore.visible's twin, so no view can show a bidi control, a zero-width or other
// invisible character raw. Newlines and tabs are kept in text, since pre blocks show them.

import { visible } from "./visible.js";

const READ = new Set(["aria-label", "title", "placeholder", "alt"]); // attributes a person reads

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (READ.has(name)) node.setAttribute(name, visible(String(value)));
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(String(child), true)));
  }
  return node;
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

export function $(selector, root = document) {
  return root.querySelector(selector);
}

export function say(node, text) {
  node.textContent = visible(String(text || ""), true);
}

// At phone width each row of a table is drawn as a card, one line a cell (console.css), each
// line named by its column's header: the names are put on the cells here (`data-label`), after
// each render. A cell spanning columns, or under a header only a screen reader reads, has none.
export function labelCells(table) {
  const names = [...table.tHead.rows[0].cells].map((th) => (th.querySelector(".visually-hidden") ? "" : th.textContent.trim()));
  for (const body of table.tBodies) {
    for (const row of body.rows) {
      let column = 0;
      for (const cell of row.cells) {
        const name = cell.colSpan === 1 && cell.tagName === "TD" ? names[column] : "";
        if (name) cell.dataset.label = name;
        else delete cell.dataset.label;
        column += cell.colSpan;
      }
    }
  }
}

export function labelBadges(label) {
  if (!label) return [el("span", { class: "badge" }, "label unknown")];
  const badges = [el("span", { class: `badge ${label.class}` }, label.class)];
  if (label.untrusted) badges.push(el("span", { class: "badge untrusted" }, "untrusted"));
  return badges;
}

export function bytes(n) {
  if (n === null || n === undefined) return "—";
  if (n < 1000) return `${n} B`;
  const units = ["kB", "MB", "GB"];
  let value = n;
  let unit = "B";
  for (const next of units) {
    if (value < 1000) break;
    value /= 1000;
    unit = next;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${unit}`;
}

export function ago(iso) {
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return iso || "";
  const seconds = Math.max(0, Math.round((Date.now() - then) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(then).toLocaleString();
}

export function span(seconds) {
  if (seconds === null || seconds === undefined || seconds < 0) return "—";
  if (seconds < 60) return `${Math.floor(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.floor(seconds % 60)} s`;
  const hours = Math.floor(seconds / 3600);
  return `${hours} h ${Math.floor((seconds % 3600) / 60)} min`;
}

export function time(iso) {
  const then = new Date(iso);
  return Number.isNaN(then.getTime()) ? iso || "" : then.toLocaleTimeString();
}

// `read` wrapped so that one runs at a time: a call while one runs asks for one more run after
// it (a change during a read is never missed), and every caller waits for the last.
export function oneAtATime(read) {
  let running = null;
  let again = false;
  return async function () {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      do {
        again = false;
        await read();
      } while (again);
    })();
    try {
      await running;
    } finally {
      running = null;
    }
  };
}
