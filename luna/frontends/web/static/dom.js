// The page's one way to build DOM. Text always goes in as text nodes, never as HTML: a model
// reply, a tool result or a memory holding <script> or <img onerror=…> shows as those
// characters. Nothing in this page uses innerHTML, insertAdjacentHTML or document.write; the
// one other way to a fragment is markdown.js, which sanitizes (and calls visibleText too).
// Bidirectional controls (U+202E and the rest of Unicode's Bidi_Control) would reorder what
// is shown: visibleText replaces each with a visible mark naming it.

const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const BIDI_NAMES = {
  0x061c: "ARABIC LETTER MARK",
  0x200e: "LEFT-TO-RIGHT MARK",
  0x200f: "RIGHT-TO-LEFT MARK",
  0x202a: "LEFT-TO-RIGHT EMBEDDING",
  0x202b: "RIGHT-TO-LEFT EMBEDDING",
  0x202c: "POP DIRECTIONAL FORMATTING",
  0x202d: "LEFT-TO-RIGHT OVERRIDE",
  0x202e: "RIGHT-TO-LEFT OVERRIDE",
  0x2066: "LEFT-TO-RIGHT ISOLATE",
  0x2067: "RIGHT-TO-LEFT ISOLATE",
  0x2068: "FIRST STRONG ISOLATE",
  0x2069: "POP DIRECTIONAL ISOLATE",
};

// Text as nodes: text nodes, with a <span class="bidi">U+202E</span> for each bidi control.
export function visibleText(text) {
  const s = String(text);
  const nodes = [];
  let last = 0;
  for (const match of s.matchAll(BIDI)) {
    if (match.index > last) nodes.push(document.createTextNode(s.slice(last, match.index)));
    const code = match[0].codePointAt(0);
    const name = `U+${code.toString(16).toUpperCase().padStart(4, "0")}`;
    const mark = document.createElement("span");
    mark.className = "bidi";
    mark.title = `${name} ${BIDI_NAMES[code]}: a control character that reorders text`;
    mark.textContent = name;
    nodes.push(mark);
    last = match.index + match[0].length;
  }
  if (last < s.length || !nodes.length) nodes.push(document.createTextNode(s.slice(last)));
  return nodes;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) {
      if (typeof value !== "function") throw new TypeError(`${key} must be a function`);
      node.addEventListener(key.slice(2), value);
    } else if (key === "class") {
      node.className = value;
    } else if (key === "dataset") {
      Object.assign(node.dataset, value);
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(node, ...children);
  return node;
}

export function append(node, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    if (child instanceof Node) node.append(child);
    else node.append(...visibleText(child));
  }
  return node;
}

export const $ = (selector, root = document) => root.querySelector(selector);

export function clear(node) {
  node.replaceChildren();
  return node;
}

// Replace what ``node`` shows with ``text`` (instead of assigning textContent).
export function setText(node, text) {
  return append(clear(node), text);
}

export function when(iso) {
  if (!iso) return "";
  const date = typeof iso === "number" ? new Date(iso * 1000) : new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
}

export function short(text, limit = 300) {
  const s = String(text ?? "");
  return s.length > limit ? s.slice(0, limit - 1) + "…" : s;
}
