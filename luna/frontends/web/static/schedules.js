// Scheduled tasks (as `luna schedule`): the list with cancel and run-now, and a form to add a
// reminder or a prompt. Results arrive as "delivery" events (shown in their chat session).

import { api } from "./api.js";
import { $, clear, el, when } from "./dom.js";

async function act(id, op) {
  try {
    await api(`/api/schedules/${id}/${op}`, { method: "POST" });
  } catch (err) {
    $("#schedule-status").textContent = err.message;
  }
  load();
}

export async function load() {
  const table = clear($("#schedule-list"));
  let data;
  try {
    data = await api(`/api/schedules?finished=${$("#schedule-finished").checked ? 1 : 0}`);
  } catch (err) {
    table.append(el("tr", {}, el("td", { class: "muted" }, err.message)));
    return;
  }
  table.append(el("tr", {}, ["#", "kind", "state", "when", "next run", "runs", "text", ""].map((h) => el("th", {}, h))));
  if (!data.tasks.length) table.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "nothing scheduled")));
  for (const t of data.tasks) {
    const live = t.state === "active";
    table.append(
      el(
        "tr",
        { dataset: { id: t.id } },
        el("td", {}, String(t.id)),
        el("td", {}, t.kind),
        el("td", {}, el("span", { class: "tag" }, t.state)),
        el("td", {}, t.schedule),
        el("td", {}, t.next_run_local || "—"),
        el("td", {}, String(t.runs), t.last_status ? el("div", { class: "muted small" }, `${t.last_status} ${when(t.last_run_at)}`) : null),
        el("td", { class: "text-cell" }, t.text),
        el(
          "td",
          {},
          live ? el("button", { class: "link run", onclick: () => act(t.id, "run") }, "run now") : null,
          live ? el("button", { class: "link cancel", onclick: () => act(t.id, "cancel") }, "cancel") : null,
        ),
      ),
    );
  }
}

export function init(currentSession) {
  $("#schedule-finished").addEventListener("change", load);
  $("#schedule-add").addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { text: $("#schedule-text").value, kind: $("#schedule-kind").value };
    body[$("#schedule-when-kind").value] = $("#schedule-when").value;
    const session = currentSession();
    if (session) body.session_id = session;
    try {
      const made = await api("/api/schedules", { method: "POST", body });
      $("#schedule-status").textContent = `scheduled #${made.id}: next ${made.next_run_local || "—"}`;
      $("#schedule-text").value = "";
      load();
    } catch (err) {
      $("#schedule-status").textContent = err.message;
    }
  });
}
