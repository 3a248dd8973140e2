// Chat: the session list, the history of the chosen session (paged, newest first), and the
// live events of its turns — streamed text, tool calls as they run, approvals, failures.
// Sending a message only starts a turn; everything shown comes from the event stream, so a
// second tab (or a reload) shows the same conversation.

import { api } from "./api.js";
import { approvalCard } from "./approvals.js";
import { clearFiles, initAttachments, pendingFiles } from "./attachments.js";
import { $, clear, el, setText, short } from "./dom.js";
import { initForget, isForgettingHere, say, setForgettable } from "./forget.js";
import { renderMarkdown } from "./markdown.js";

const PAGE = 100;
let current = null; // session id
let isSaved = false; // the current session has messages (it can be forgotten)
let oldest = null; // id of the oldest message shown, for paging
const turns = new Map(); // turn id -> { box, segment, tools: Map(call id -> line) }
let running = []; // snapshot of running turns from the last hello
let hellos = 0;

const messages = () => $("#messages");

function nearBottom() {
  const box = messages();
  return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
}

function keepBottom(wasNear) {
  if (wasNear) messages().scrollTop = messages().scrollHeight;
}

// A user's text is shown as typed; Luna's is Markdown, rendered safely (markdown.js).
function bubble(role, text) {
  if (role.startsWith("assistant")) return markdownBubble(`msg ${role}`, text);
  return el("div", { class: `msg ${role}` }, el("div", { class: "text" }, text));
}

function markdownBubble(classes, text) {
  const box = el("div", { class: "text markdown" }, renderMarkdown(text));
  return el("div", { class: classes }, box);
}

// A streamed reply: its raw text grows; it is re-rendered at most once a frame.
function grow(segment, more) {
  segment.raw = (segment.raw || "") + more;
  if (segment.pending) return;
  segment.pending = true;
  requestAnimationFrame(() => render(segment));
}

function render(segment) {
  segment.pending = false;
  $(".text", segment).replaceChildren(renderMarkdown(segment.raw || ""));
}

function toolLine(name, args) {
  return el(
    "details",
    { class: "tool tool-running" },
    el(
      "summary",
      {},
      el("span", { class: "tool-icon" }, "⚙"),
      " ",
      el("code", {}, name),
      " ",
      el("span", { class: "tool-args" }, short(args, 160)),
      " ",
      el("span", { class: "tool-status" }, "running…"),
    ),
    el("pre", { class: "tool-result" }),
  );
}

function finishTool(line, isError, seconds, preview) {
  line.classList.remove("tool-running");
  line.classList.add(isError ? "tool-error" : "tool-ok");
  $(".tool-status", line).textContent =
    (isError ? "error" : "ok") + (seconds === undefined ? "" : ` (${seconds.toFixed(1)}s)`);
  setText($(".tool-result", line), preview);
}

// ---- history -------------------------------------------------------------------------

function fileLine(file) {
  return el("div", { class: "file muted small" }, `attached: ${file.name}`);
}

function renderMessages(list, container) {
  const tools = new Map();
  for (const m of list) {
    if (m.role === "user") {
      container.append(bubble("user", m.content));
      for (const file of m.files || []) container.append(fileLine(file));
    }
    else if (m.role === "assistant") {
      if (m.content) container.append(bubble("assistant", m.content));
      for (const call of m.tool_calls || []) {
        const line = toolLine(call.function?.name || "?", call.function?.arguments || "");
        line.classList.replace("tool-running", "tool-ran");
        $(".tool-status", line).textContent = "ran";
        tools.set(call.id, line);
        container.append(line);
      }
    } else if (m.role === "tool") {
      const line = tools.get(m.tool_call_id);
      if (line) setText($(".tool-result", line), m.content);
    }
  }
}

async function loadOlder() {
  const page = await api(
    `/api/sessions/${encodeURIComponent(current)}/messages?limit=${PAGE}&before=${oldest}`,
  );
  const box = messages();
  const fragment = document.createDocumentFragment();
  renderMessages(page.messages, fragment);
  const more = $(".load-older", box);
  if (more) more.remove();
  const height = box.scrollHeight;
  box.prepend(fragment);
  if (page.messages.length) oldest = page.messages[0].id;
  if (page.has_more) box.prepend(olderButton());
  box.scrollTop += box.scrollHeight - height;
}

function olderButton() {
  return el("button", { class: "load-older link", onclick: loadOlder }, "Load older messages");
}

export async function switchTo(sessionId) {
  current = sessionId;
  localStorage.setItem("luna.session", sessionId);
  turns.clear();
  $("#session-title").textContent = `session ${sessionId}`;
  let listed = false;
  for (const li of document.querySelectorAll("#session-list li")) {
    li.classList.toggle("active", li.dataset.id === sessionId);
    const button = li.querySelector("button.session");
    if (button) button.setAttribute("aria-current", String(li.dataset.id === sessionId));
    listed ||= li.dataset.id === sessionId && !li.classList.contains("unsaved");
  }
  isSaved = listed;
  setForgettable(isSaved);
  const box = clear(messages());
  const page = await api(`/api/sessions/${encodeURIComponent(sessionId)}/messages?limit=${PAGE}`);
  if (current !== sessionId) return;
  isSaved ||= page.messages.length > 0;
  setForgettable(isSaved);
  let list = page.messages;
  const live = running.filter((t) => t.session_id === sessionId);
  for (const turn of live) {
    // The running turn's messages are already logged; its events redraw them instead.
    const at = list.map((m) => m.role === "user" && m.content === turn.text).lastIndexOf(true);
    if (at >= 0) list = list.slice(0, at);
  }
  if (page.has_more) box.append(olderButton());
  renderMessages(list, box);
  oldest = page.messages.length ? page.messages[0].id : null;
  for (const turn of live) for (const event of turn.events) onEvent(event);
  box.scrollTop = box.scrollHeight;
}

// ---- sessions ------------------------------------------------------------------------

export async function loadSessions() {
  const data = await api("/api/sessions?limit=200");
  const list = clear($("#session-list"));
  const ids = data.sessions.map((s) => s.id);
  if (current && !ids.includes(current)) {
    list.append(el("li", { class: "active unsaved", dataset: { id: current } }, "(new session)"));
  }
  isSaved ||= ids.includes(current);
  setForgettable(isSaved);
  for (const s of data.sessions) {
    list.append(
      el(
        "li",
        { class: s.id === current ? "active" : "", dataset: { id: s.id }, title: s.id },
        // A button inside the item: reached with Tab, opened with Enter or Space.
        el(
          "button",
          {
            type: "button",
            class: "session",
            "aria-current": s.id === current ? "true" : "false",
            onclick: () => switchTo(s.id),
          },
          el("div", { class: "title" }, s.title || s.id),
          el("div", { class: "muted small" }, `${s.messages} messages · ${s.scope}`),
        ),
      ),
    );
  }
  return data.sessions;
}

async function newSession() {
  const made = await api("/api/sessions", { method: "POST" });
  await switchTo(made.id);
  await loadSessions();
  $("#input").focus();
}

let leaving = null; // the forgotten session this page is moving away from

// A forgotten session (here, or in another window: the event stream says so) leaves the list;
// a page showing it goes on in a new session, once.
async function afterForget(sessionId) {
  if (current !== sessionId || leaving === sessionId) {
    await loadSessions();
    return;
  }
  leaving = sessionId;
  try {
    if (!isForgettingHere(sessionId)) say("This session was forgotten in another window.");
    await newSession();
  } finally {
    leaving = null;
  }
}

// ---- live events ---------------------------------------------------------------------

function turnFor(event) {
  let turn = turns.get(event.turn_id);
  if (!turn) {
    const box = el("div", { class: "turn", dataset: { turnId: event.turn_id } });
    messages().append(box);
    turn = { box, segment: null, tools: new Map(), status: null };
    turns.set(event.turn_id, turn);
  }
  return turn;
}

export function currentSession() {
  return current;
}

export function onEvent(event) {
  if (event.type === "hello") {
    running = event.running || [];
    hellos += 1;
    // A reconnect may have missed events; a running turn of this session redraws from its own.
    if (current && (hellos > 1 || running.some((t) => t.session_id === current))) switchTo(current);
    return;
  }
  if (event.type === "session_forgotten") {
    afterForget(event.session_id);
    return;
  }
  if (event.type === "done" || event.type === "failed") loadSessions();
  if (event.type === "delivery") {
    if (event.session_id === current) {
      const wasNear = nearBottom();
      messages().append(markdownBubble("msg assistant delivery", event.text));
      keepBottom(wasNear);
    }
    return;
  }
  if (!event.turn_id && event.type !== "approval" && event.type !== "approval_resolved") return;
  if (event.session_id !== current) return;
  const wasNear = nearBottom();
  if (event.type === "approval") {
    const turn = [...turns.values()].at(-1);
    (turn ? turn.box : messages()).append(approvalCard(event.approval));
    keepBottom(wasNear);
    return;
  }
  if (event.type === "approval_resolved") return;
  const turn = turnFor(event);
  switch (event.type) {
    case "turn_started":
      turn.box.append(bubble("user", event.text));
      for (const file of event.files || []) turn.box.append(fileLine(file));
      turn.typing = el("div", { class: "typing muted" }, "Luna is thinking…");
      turn.box.append(turn.typing);
      break;
    case "text":
      if (!turn.segment) {
        turn.segment = bubble("assistant streaming", "");
        turn.box.insertBefore(turn.segment, turn.typing || null);
      }
      grow(turn.segment, event.text);
      break;
    case "status":
      if (!turn.status) {
        turn.status = el("div", { class: "status muted" });
        turn.box.insertBefore(turn.status, turn.typing || null);
      }
      setText(turn.status, event.text);
      break;
    case "tool_started": {
      turn.segment = null;
      const line = toolLine(event.name, event.arguments);
      turn.tools.set(event.call_id, line);
      turn.box.insertBefore(line, turn.typing || null);
      break;
    }
    case "tool_finished": {
      const line = turn.tools.get(event.call_id);
      if (line) finishTool(line, event.is_error, event.duration_s, event.preview);
      break;
    }
    case "done":
    case "failed":
      if (turn.typing) turn.typing.remove();
      if (turn.status) turn.status.remove();
      for (const seg of turn.box.querySelectorAll(".streaming")) {
        render(seg); // the last deltas, now rather than at the next frame
        seg.classList.remove("streaming");
      }
      if (event.type === "failed") turn.box.append(el("div", { class: "msg error" }, event.message));
      else if (!turn.box.querySelector(".assistant") && event.reply) {
        turn.box.append(bubble("assistant", event.reply));
      }
      turn.box.classList.add("finished");
      break;
    default:
      break;
  }
  keepBottom(wasNear);
}

function formWith(text, files) {
  const form = new FormData();
  form.append("text", text);
  for (const file of files) form.append("file", file, file.name);
  return form;
}

async function send(event) {
  event.preventDefault();
  const input = $("#input");
  const text = input.value;
  const files = pendingFiles();
  if ((!text.trim() && !files.length) || !current) return;
  input.value = "";
  clearFiles();
  try {
    const sent = await api(`/api/sessions/${encodeURIComponent(current)}/messages`, {
      method: "POST",
      body: files.length ? formWith(text, files) : { text },
    });
    for (const line of sent?.refused || []) {
      messages().append(el("div", { class: "msg error refused" }, `not taken: ${line}`));
    }
  } catch (err) {
    messages().append(el("div", { class: "msg error" }, `not sent: ${err.message}`));
    input.value = text;
  }
}

export async function init() {
  $("#new-session").addEventListener("click", newSession);
  $("#composer").addEventListener("submit", send);
  initAttachments();
  initForget(currentSession, afterForget);
  $("#input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("#composer").requestSubmit();
    }
  });
  const sessions = await loadSessions();
  const saved = localStorage.getItem("luna.session");
  const first = saved || sessions[0]?.id;
  if (first) await switchTo(first);
  else await newSession();
}
