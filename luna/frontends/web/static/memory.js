// The memory browser: hybrid search (as `luna memory search`), the list of memories (as
// `luna memory list`), one memory's provenance and supersession, add and forget.

import { api } from "./api.js";
import { $, append, clear, el, short, when } from "./dom.js";

function header(...names) {
  return el("tr", {}, names.map((n) => el("th", {}, n)));
}

function superseded(row) {
  return row.superseded_by ? el("span", { class: "tag" }, `superseded by #${row.superseded_by}`) : null;
}

async function showDetail(id) {
  const box = $("#memory-detail");
  box.hidden = false;
  clear(box).append(el("p", { class: "muted" }, "loading…"));
  let m;
  try {
    m = await api(`/api/memory/${id}`);
  } catch (err) {
    clear(box).append(el("p", { class: "error" }, err.message));
    return;
  }
  const facts = [
    ["source", m.source],
    ["speaker", m.speaker || "—"],
    ["scope", m.scope],
    ["session", m.session_id || "—"],
    ["external id", m.external_id || "—"],
    ["importance", m.importance],
    ["created", when(m.created_at)],
    ["updated", when(m.updated_at)],
  ];
  const forget = el("button", { class: "danger forget" }, "Forget");
  forget.addEventListener("click", async () => {
    if (!forget.classList.contains("confirm")) {
      forget.classList.add("confirm");
      forget.textContent = "Really forget?";
      setTimeout(() => {
        forget.classList.remove("confirm");
        forget.textContent = "Forget";
      }, 4000);
      return;
    }
    await api(`/api/memory/${id}`, { method: "DELETE" });
    clear(box).append(el("p", { class: "muted forgotten" }, `Memory #${id} forgotten.`));
    rerun();
  });
  append(
    clear(box),
    el("h3", {}, `Memory #${m.id}`),
    el("p", { class: "memory-text" }, m.text),
    el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))])),
    m.superseded_chain.length
      ? el(
          "div",
          {},
          el("h4", {}, "Replaced by"),
          el("ul", {}, m.superseded_chain.map((s) => el("li", {}, `#${s.id} (${when(s.created_at)}): `, s.text))),
        )
      : null,
    m.supersedes.length
      ? el(
          "div",
          {},
          el("h4", {}, "Replaces"),
          el("ul", {}, m.supersedes.map((s) => el("li", {}, `#${s.id} (${when(s.created_at)}): `, s.text))),
        )
      : null,
    forget,
  );
}

let last = () => listAll();

function rerun() {
  last();
}

function memoryRow(cells, id) {
  const row = el("tr", { class: id ? "clickable" : "", dataset: { id: id ?? "" } }, cells);
  if (id) row.addEventListener("click", () => showDetail(id));
  return row;
}

export async function search(query) {
  last = () => search(query);
  const table = clear($("#memory-results"));
  const data = await api(`/api/memory?q=${encodeURIComponent(query)}&k=30`);
  table.append(header("kind", "#", "score", "when", "source", "text"));
  if (!data.results.length) table.append(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "nothing found")));
  for (const r of data.results) {
    const id = r.kind === "memory" ? r.ref_id : null;
    table.append(
      memoryRow(
        [
          el("td", {}, r.kind),
          el("td", {}, String(r.id)),
          el("td", {}, r.score.toFixed(3)),
          el("td", {}, when(r.created_at)),
          el("td", {}, r.source, r.session_id ? el("div", { class: "muted small" }, r.session_id) : null),
          el("td", { class: "text-cell" }, short(r.text, 400), " ", superseded(r)),
        ],
        id,
      ),
    );
  }
}

export async function listAll() {
  last = () => listAll();
  const table = clear($("#memory-results"));
  const data = await api("/api/memory?limit=200");
  table.append(header("#", "when", "imp", "scope", "source", "text"));
  if (!data.memories.length) table.append(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "no memories yet")));
  for (const m of data.memories) {
    table.append(
      memoryRow(
        [
          el("td", {}, String(m.id)),
          el("td", {}, when(m.created_at)),
          el("td", {}, String(m.importance)),
          el("td", {}, m.scope),
          el("td", {}, m.source),
          el("td", { class: "text-cell" }, short(m.text, 400), " ", superseded(m)),
        ],
        m.id,
      ),
    );
  }
}

export function init() {
  $("#memory-search").addEventListener("submit", (event) => {
    event.preventDefault();
    const query = $("#memory-query").value.trim();
    if (query) search(query);
    else listAll();
  });
  $("#memory-list-all").addEventListener("click", () => listAll());
  $("#memory-add").addEventListener("submit", async (event) => {
    event.preventDefault();
    const status = $("#memory-status");
    try {
      const made = await api("/api/memory", {
        method: "POST",
        body: { text: $("#memory-text").value, importance: Number($("#memory-importance").value) },
      });
      status.textContent = `remembered #${made.id}`;
      $("#memory-text").value = "";
      rerun();
    } catch (err) {
      status.textContent = err.message;
    }
  });
}

export function show() {
  rerun();
}
