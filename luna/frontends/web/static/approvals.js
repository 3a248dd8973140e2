// Approvals: tools at level "ask" wait for the owner. The same card shows in the Approvals tab
// and inside the chat where the tool was called; either one answers. No answer before the
// deadline means deny (the server decides that, this page only counts down).

import { api } from "./api.js";
import { $, clear, el } from "./dom.js";

const pending = new Map(); // id -> approval
const cards = new Map(); // id -> Set of card elements

function countdown(approval) {
  const left = Math.max(0, Math.round(approval.expires - Date.now() / 1000));
  return `denied in ${left}s unless you answer`;
}

async function answer(id, decision, card) {
  for (const button of card.querySelectorAll("button")) button.disabled = true;
  try {
    await api(`/api/approvals/${encodeURIComponent(id)}`, { method: "POST", body: { decision } });
  } catch (err) {
    $(".approval-status", card).textContent = `could not answer: ${err.message}`;
  }
}

export function approvalCard(approval) {
  const card = el(
    "div",
    { class: "approval card", dataset: { approvalId: approval.id } },
    el("div", { class: "approval-head" }, "🔐 May I run ", el("code", {}, approval.tool), "?"),
    el("pre", { class: "args" }, approval.arguments),
    el(
      "div",
      { class: "approval-actions" },
      el("button", { class: "approve", onclick: () => answer(approval.id, "approve", card) }, "Approve"),
      el("button", { class: "deny", onclick: () => answer(approval.id, "deny", card) }, "Deny"),
      el("span", { class: "approval-status muted" }, countdown(approval)),
    ),
  );
  if (!cards.has(approval.id)) cards.set(approval.id, new Set());
  cards.get(approval.id).add(card);
  return card;
}

function resolved(id, outcome) {
  const shown = { approved: "✅ approved", denied: "❌ denied", timeout: "⏱️ no answer: denied" };
  for (const card of cards.get(id) || []) {
    card.classList.add("resolved");
    for (const button of card.querySelectorAll("button")) button.remove();
    $(".approval-status", card).textContent = shown[outcome] || outcome;
  }
  cards.delete(id);
}

function render() {
  const list = $("#approval-list");
  clear(list);
  if (!pending.size) list.append(el("p", { class: "muted" }, "Nothing is waiting for you."));
  for (const approval of pending.values()) {
    list.append(
      el("div", { class: "muted" }, `session ${approval.session_id}`),
      approvalCard(approval),
    );
  }
  const badge = $("#approval-count");
  badge.textContent = String(pending.size);
  badge.hidden = pending.size === 0;
}

export function onEvent(event) {
  if (event.type === "hello") {
    pending.clear();
    for (const approval of event.approvals || []) pending.set(approval.id, approval);
    render();
  } else if (event.type === "approval") {
    pending.set(event.approval.id, event.approval);
    render();
  } else if (event.type === "approval_resolved") {
    pending.delete(event.id);
    resolved(event.id, event.outcome);
    render();
  }
}

export function init() {
  render();
  setInterval(() => {
    for (const [id, approval] of pending) {
      for (const card of cards.get(id) || []) {
        $(".approval-status", card).textContent = countdown(approval);
      }
    }
  }, 1000);
}
