// Forgetting the current session, as `luna sessions forget` does: the button in the session's
// header opens a dialog saying what goes (GET /api/sessions/{id}: its messages, the files only
// it used, the memories learned in it, which the owner may keep), then DELETE forgets it.
// While a turn runs in the session the server answers 409: the dialog says so in one line and
// stays open. The dialog is a native modal <dialog>: focus stays inside it, Escape cancels, and
// closing it without forgetting puts focus back on the button; after a forget the caller moves
// the page to a new session.

import { api, ApiError } from "./api.js";
import { $, clear, el, setText } from "./dom.js";

let session = null; // the id the open dialog is about
let seen = null; // what GET said the session holds, or null
let isBusy = false; // a DELETE is on its way
let isOpening = false;
let hasForgotten = false;
let afterForget = async () => {};

const STATUS_MS = 20000;
const dialog = () => $("#forget-dialog");

function count(n, one, many = `${one}s`) {
  return `${n === 0 ? "no" : n} ${n === 1 ? one : many}`;
}

function dates(first, last) {
  const [a, b] = [(first || "").slice(0, 10), (last || "").slice(0, 10)];
  if (!a) return "";
  return a === b || !b ? `, ${a}` : `, ${a} to ${b}`;
}

function memoriesLine() {
  const memories = count(seen.memories, "memory", "memories");
  return $("#forget-keep-memories").checked
    ? `${memories} learned in it: kept, not removed`
    : `${memories} learned in it`;
}

// The session's title as the list shows it (its first line), so the owner sees which one.
function titleOf(sessionId) {
  const item = $(`#session-list li[data-id="${CSS.escape(sessionId)}"] .title`);
  return item ? item.textContent : sessionId;
}

function describe() {
  const list = clear($("#forget-list"));
  const keep = $("#forget-keep-memories");
  keep.checked = false;
  if (!seen) {
    setText($("#forget-what"), "This removes its messages, the files only it used and the memories learned in it.");
    keep.closest("label").hidden = false;
    return;
  }
  setText($("#forget-what"), "This removes, for good:");
  const files = seen.files === 1 ? "unless another session has it too" : "except those another session has too";
  list.append(
    el("li", {}, `${count(seen.messages, "message")}${dates(seen.first_at, seen.last_at)}`),
    el("li", {}, `${count(seen.files, "attached file")}${seen.files ? `, ${files}` : ""}`),
    el("li", { class: "memories" }, memoriesLine()),
  );
  keep.closest("label").hidden = seen.memories === 0;
  if (seen.tasks) {
    list.after(
      el("p", { class: "muted small tasks" }, `${count(seen.tasks, "scheduled task")} made in it will go on (see Schedules).`),
    );
  }
}

function reset() {
  for (const note of dialog().querySelectorAll(".tasks")) note.remove();
  setText($("#forget-error"), "");
  const confirm = $("#forget-confirm");
  confirm.disabled = false;
  setText(confirm, "Forget session");
}

async function open(sessionId) {
  if (!sessionId || isBusy || isOpening || dialog().open) return;
  session = sessionId;
  hasForgotten = false;
  reset();
  isOpening = true; // a second click while the counts load opens nothing more
  try {
    seen = await api(`/api/sessions/${encodeURIComponent(sessionId)}`);
  } catch (err) {
    seen = null;
    if (err instanceof ApiError && err.status === 404) {
      setText($("#forget-error"), "Nothing of this session is saved: there is nothing to forget.");
      $("#forget-confirm").disabled = true;
    } else {
      setText($("#forget-error"), `Could not read what it holds: ${err.message}`);
    }
  } finally {
    isOpening = false;
  }
  setText($("#forget-name"), titleOf(sessionId));
  describe();
  dialog().showModal();
  $("#forget-cancel").focus();
}

function summary(outcome) {
  const parts = [count(outcome.messages, "message")];
  parts.push(`${count(outcome.files_removed, "file")} removed`);
  if (outcome.files_kept) parts.push(`${count(outcome.files_kept, "file")} kept (still in use)`);
  parts.push(`${count(outcome.memories, "memory", "memories")} forgotten`);
  return `Session forgotten: ${parts.join(", ")}.`;
}

let statusTimer = null;

// The outcome, in the session list's status line (read out by screen readers) for a while.
export function say(text) {
  setText($("#session-status"), text);
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => setText($("#session-status"), ""), STATUS_MS);
}

function failure(err) {
  if (err instanceof ApiError && err.status === 409) {
    return "A turn is running in this session: forget it once Luna has answered.";
  }
  return `Could not forget it: ${err.message}`;
}

async function forget() {
  if (isBusy || !session) return;
  isBusy = true;
  const confirm = $("#forget-confirm");
  confirm.disabled = true;
  setText(confirm, "Forgetting…");
  setText($("#forget-error"), "");
  const keep = $("#forget-keep-memories").checked ? "?keep_memories=1" : "";
  let outcome = null;
  try {
    outcome = await api(`/api/sessions/${encodeURIComponent(session)}${keep}`, { method: "DELETE" });
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) {
      setText($("#forget-error"), failure(err));
      confirm.disabled = false;
      setText(confirm, "Forget session");
      return;
    }
  } finally {
    isBusy = false;
  }
  hasForgotten = true;
  dialog().close();
  say(outcome ? summary(outcome) : "That session was already forgotten.");
  await afterForget(session);
  $("#input").focus(); // also when the event stream moved the page on while the dialog was open
}

// This page is the one forgetting ``sessionId`` (its DELETE is on its way or done).
export function isForgettingHere(sessionId) {
  return session === sessionId && (isBusy || hasForgotten);
}

// Show the button only for a session that has something saved.
export function setForgettable(isSaved) {
  $("#forget-session").hidden = !isSaved;
}

export function initForget(currentSession, onForgotten) {
  afterForget = onForgotten;
  $("#forget-session").addEventListener("click", () => open(currentSession()));
  $("#forget-cancel").addEventListener("click", () => dialog().close());
  $("#forget-confirm").addEventListener("click", forget);
  $("#forget-keep-memories").addEventListener("change", () => {
    const line = $("#forget-list .memories");
    if (!line || !seen) return;
    setText(line, memoriesLine());
    line.classList.toggle("kept", $("#forget-keep-memories").checked);
  });
  dialog().addEventListener("cancel", (event) => {
    if (isBusy) event.preventDefault(); // Escape while the forget is on its way: wait for it
  });
  dialog().addEventListener("close", () => {
    if (!hasForgotten) $("#forget-session").focus();
  });
}
