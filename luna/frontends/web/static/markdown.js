// Markdown in Luna's replies, rendered safely: the page's one way to a fragment that dom.js
// did not build node by node.
//
// - marked (GFM) turns the text into HTML; every raw HTML token in the text (block or inline)
//   is written back as escaped text, so raw HTML is never markup, and an image is a link.
// - DOMPurify keeps an allow-list of tags and attributes (no style, no on*, no img, no form)
//   and returns a DOM fragment: no string is ever assigned as HTML here.
// - Links keep only http(s) URLs, open in a new tab with rel="noopener noreferrer"; any other
//   link becomes its text. Code blocks get a Copy button. Bidi controls in the text become
//   visible marks (dom.js visibleText).

import DOMPurify from "./vendor/dompurify/purify.es.mjs";
import { Marked } from "./vendor/marked/marked.esm.js";
import { el, visibleText } from "./dom.js";

const TAGS = [
  "p", "br", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li", "a",
  "table", "thead", "tbody", "tr", "th", "td", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
];
const ATTRS = ["href", "title", "start", "align"];
const WEB_URL = /^https?:\/\//i;
const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

function escapeHtml(text) {
  return String(text)
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#39;");
}

const marked = new Marked({
  gfm: true,
  breaks: false, // a single newline stays a newline (the page shows it as one)
  renderer: {
    html: ({ text }) => escapeHtml(text),
    image: ({ href, text }) => `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`,
  },
});

function copyButton(pre) {
  const button = el("button", { class: "copy link", type: "button" }, "Copy");
  button.addEventListener("click", async () => {
    const code = pre.textContent.replace(/\n$/, "");
    try {
      await navigator.clipboard.writeText(code);
      button.textContent = "Copied";
    } catch {
      const range = document.createRange(); // no clipboard (plain HTTP on the LAN): select it
      range.selectNodeContents(pre);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      button.textContent = "Selected: press Ctrl+C";
    }
    setTimeout(() => (button.textContent = "Copy"), 2000);
  });
  return button;
}

function finish(fragment) {
  for (const link of fragment.querySelectorAll("a")) {
    const href = link.getAttribute("href") || "";
    if (!WEB_URL.test(href)) {
      link.replaceWith(...link.childNodes);
      continue;
    }
    link.rel = "noopener noreferrer";
    link.target = "_blank";
  }
  for (const pre of fragment.querySelectorAll("pre")) {
    const block = el("div", { class: "code-block" });
    pre.replaceWith(block);
    block.append(copyButton(pre), pre);
  }
  const walker = document.createTreeWalker(fragment, NodeFilter.SHOW_TEXT);
  const found = [];
  while (walker.nextNode()) if (BIDI.test(walker.currentNode.data)) found.push(walker.currentNode);
  for (const node of found) node.replaceWith(...visibleText(node.data));
  for (const node of [...fragment.childNodes]) {
    if (node.nodeType === Node.TEXT_NODE && !node.data.trim()) node.remove();
  }
  return fragment;
}

// ``text`` as Markdown: a sanitized DocumentFragment (see the file's opening comment).
export function renderMarkdown(text) {
  const html = marked.parse(String(text ?? ""), { async: false });
  const fragment = DOMPurify.sanitize(html, {
    ALLOWED_TAGS: TAGS,
    ALLOWED_ATTR: ATTRS,
    ALLOWED_URI_REGEXP: WEB_URL,
    ALLOW_DATA_ATTR: false,
    ALLOW_ARIA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  });
  return finish(fragment);
}
