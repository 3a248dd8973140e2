// Settings: the effective configuration with the source of each value (`luna config show`);
// a change goes through the same validation and write as `luna config set` and applies at the
// next start (shown as "after restart"). Doctor runs `luna doctor` and lists its checks.

import { api } from "./api.js";
import { $, clear, el } from "./dom.js";

function shown(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

function editor(item, cell) {
  const input = el("input", { class: "config-input", value: shown(item.value) });
  const save = el("button", { class: "save" }, "Save");
  const cancel = el("button", { class: "link" }, "cancel");
  const form = el("form", { class: "inline" }, input, save, cancel);
  cancel.addEventListener("click", (event) => {
    event.preventDefault();
    load();
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const status = $("#config-status");
    try {
      const done = await api("/api/config", { method: "POST", body: { key: item.key, value: input.value } });
      status.textContent = `${done.key} = ${shown(done.value)}: ${done.note}`;
      status.className = "ok";
      await load();
    } catch (err) {
      status.textContent = err.message;
      status.className = "error";
    }
  });
  clear(cell).append(form);
  input.focus();
}

export async function load() {
  const data = await api("/api/config");
  $("#config-path").textContent = `config file: ${data.path}`;
  const table = clear($("#config-table"));
  table.append(el("tr", {}, ["key", "value", "source", "after restart", ""].map((h) => el("th", {}, h))));
  for (const item of data.items) {
    const valueCell = el("td", { class: "value" }, shown(item.value));
    const isSecret = /\.(token|api_key)$/.test(item.key);
    const pending = Object.hasOwn(data.pending, item.key) ? shown(data.pending[item.key]) : "";
    table.append(
      el(
        "tr",
        { dataset: { key: item.key } },
        el("td", {}, el("code", {}, item.key)),
        valueCell,
        el("td", { class: "muted" }, item.source),
        el("td", { class: "pending" }, pending),
        el(
          "td",
          {},
          isSecret
            ? el("span", { class: "muted small" }, "environment only")
            : el("button", { class: "link edit", onclick: () => editor(item, valueCell) }, "edit"),
        ),
      ),
    );
  }
  filter();
  if (data.file_error) {
    $("#config-status").textContent = data.file_error;
    $("#config-status").className = "error";
  }
}

async function doctor() {
  const box = clear($("#doctor-results"));
  box.append(el("p", { class: "muted" }, "running doctor…"));
  try {
    const data = await api("/api/doctor");
    clear(box).append(
      el("h3", {}, data.ok ? "Doctor: Luna is ready" : "Doctor: fix the failed lines"),
      el(
        "ul",
        { class: "doctor" },
        data.checks.map((c) =>
          el(
            "li",
            { class: c.ok === null ? "skipped" : c.ok ? "ok" : c.essential ? "failed" : "warn" },
            el("strong", {}, c.ok === null ? "– " : c.ok ? "✓ " : c.essential ? "✗ " : "⚠ "),
            `${c.name}: ${c.detail}`,
            c.ok === false && c.fix ? el("div", { class: "muted small" }, `fix: ${c.fix}`) : null,
          ),
        ),
      ),
    );
  } catch (err) {
    clear(box).append(el("p", { class: "error" }, err.message));
  }
}

function filter() {
  const wanted = $("#config-filter").value.trim().toLowerCase();
  for (const row of document.querySelectorAll("#config-table tr[data-key]")) {
    row.hidden = Boolean(wanted) && !row.dataset.key.toLowerCase().includes(wanted);
  }
}

export function init() {
  $("#doctor-run").addEventListener("click", doctor);
  $("#config-filter").addEventListener("input", filter);
}
