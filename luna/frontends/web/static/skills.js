// The skills browser: every skill Luna sees (as `luna skills list`), one skill's front matter,
// files and instructions (as `luna skills show`), and the folders left out with their fix.
// Read-only: install, remove and enable with `luna skills ...`; a skill the model wants to
// save waits on the Approvals tab with its whole text.

import { api } from "./api.js";
import { $, append, clear, el } from "./dom.js";
import { renderMarkdown } from "./markdown.js";

async function showSkill(name) {
  const box = $("#skill-detail");
  box.hidden = false;
  clear(box).append(el("p", { class: "muted" }, "loading…"));
  let s;
  try {
    s = await api(`/api/skills/${encodeURIComponent(name)}`);
  } catch (err) {
    clear(box).append(el("p", { class: "error" }, err.message));
    return;
  }
  const facts = [
    ["source", s.source],
    ["enabled", s.enabled ? "yes" : "no"],
    ["folder", s.folder],
    ["license", s.license || "—"],
    ["compatibility", s.compatibility || "—"],
    ["allowed-tools", s.allowed_tools.join(" ") || "—"],
    ...Object.entries(s.metadata).map(([k, v]) => [k, v]),
    ["files", s.files.join(", ") || "none"],
  ];
  append(
    clear(box),
    el("h3", {}, s.name),
    el("p", {}, s.description),
    el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))])),
    el("div", { class: "skill-body" }, renderMarkdown(s.body)),
  );
}

export async function load() {
  const table = clear($("#skill-list"));
  const left = clear($("#skill-left-out"));
  const data = await api("/api/skills");
  if (!data.enabled) {
    table.append(el("tr", {}, el("td", { class: "muted" }, "skills are off (skills.enabled = false)")));
    return;
  }
  table.append(el("tr", {}, ["name", "source", "enabled", "description"].map((n) => el("th", {}, n))));
  for (const s of data.skills) {
    const row = el(
      "tr",
      { class: "clickable", dataset: { name: s.name } },
      el("td", {}, s.name),
      el("td", {}, s.source),
      el("td", {}, s.enabled ? "yes" : "no"),
      el("td", { class: "text-cell" }, s.description),
    );
    row.addEventListener("click", () => showSkill(s.name));
    table.append(row);
  }
  if (data.left_out.length) {
    left.append(el("h3", {}, `Left out (${data.left_out.length})`));
    left.append(
      el(
        "ul",
        {},
        data.left_out.map((p) => el("li", {}, el("code", {}, p.file), `: ${p.problem} `, el("span", { class: "muted" }, `(${p.fix})`))),
      ),
    );
  }
}
