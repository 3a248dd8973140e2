// Usage and cache charts from the JSON-lines event log (the data `luna stats` reads): tokens
// per day, cached vs prefilled prompt tokens, turn latency p50/p95, tool calls and errors;
// plus the summary, the latest tool runs and the tools' permission levels on the web.

import { api } from "./api.js";
import { $, clear, el, short, when } from "./dom.js";

const charts = new Map();
const COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"];

function draw(id, type, labels, datasets, { stacked = false, unit = "" } = {}) {
  if (!window.Chart) return;
  charts.get(id)?.destroy();
  const chart = new window.Chart($(`#${id}`), {
    type,
    data: {
      labels,
      datasets: datasets.map((d, i) => ({
        backgroundColor: COLORS[i % COLORS.length],
        borderColor: COLORS[i % COLORS.length],
        spanGaps: true,
        ...d,
      })),
    },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      interaction: { mode: "index", intersect: false },
      scales: {
        x: { stacked },
        y: { stacked, beginAtZero: true, title: { display: Boolean(unit), text: unit } },
      },
    },
  });
  charts.set(id, chart);
}

function ms(value) {
  if (value === null || value === undefined) return "–";
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value)} ms`;
}

function card(label, value) {
  return el("div", { class: "stat card" }, el("div", { class: "stat-value" }, value), el("div", { class: "muted" }, label));
}

export async function refresh() {
  const days = $("#usage-days").value;
  const data = await api(`/api/stats?days=${days}`);
  const s = data.summary;
  clear($("#usage-summary")).append(
    card("turns", s.turns.toLocaleString()),
    card("LLM calls", s.llm_calls.toLocaleString()),
    card("prompt tokens", s.prompt_tokens.toLocaleString()),
    card("completion tokens", s.completion_tokens.toLocaleString()),
    card("turn latency p50 / p95", `${ms(s.turn_latency_ms.p50)} / ${ms(s.turn_latency_ms.p95)}`),
    card("tool calls / errors", `${s.tool_calls} / ${s.tool_errors}`),
  );
  const labels = data.daily.map((d) => d.day.slice(5));
  const col = (key) => data.daily.map((d) => d[key]);
  draw("chart-tokens", "bar", labels, [
    { label: "prompt", data: col("prompt_tokens") },
    { label: "completion", data: col("completion_tokens") },
  ], { stacked: true, unit: "tokens" });
  draw("chart-cache", "bar", labels, [
    { label: "cached (KV cache)", data: col("cached_tokens") },
    { label: "prefilled", data: col("prefilled_tokens") },
  ], { stacked: true, unit: "prompt tokens" });
  draw("chart-latency", "line", labels, [
    { label: "p50", data: data.daily.map((d) => d.turn_latency_ms.p50) },
    { label: "p95", data: data.daily.map((d) => d.turn_latency_ms.p95) },
  ], { unit: "ms" });
  draw("chart-tools", "bar", labels, [
    { label: "calls", data: col("tool_calls") },
    { label: "errors", data: col("tool_errors") },
  ], { unit: "tool runs" });
  await Promise.all([toolRuns(days), tools()]);
}

async function toolRuns(days) {
  const data = await api(`/api/tools/runs?days=${days}&limit=50`);
  const table = clear($("#tool-runs"));
  table.append(el("tr", {}, ["when", "tool", "session", "duration", "bytes", "result"].map((h) => el("th", {}, h))));
  if (!data.runs.length) table.append(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "no tool runs yet")));
  for (const r of data.runs) {
    table.append(
      el(
        "tr",
        { class: r.is_error ? "error-row" : "" },
        el("td", {}, when(r.ts)),
        el("td", {}, el("code", {}, r.tool)),
        el("td", {}, short(r.session_id || "", 40)),
        el("td", {}, ms(r.duration_ms)),
        el("td", {}, String(r.output_bytes ?? "")),
        el("td", {}, r.is_error ? "error" : "ok"),
      ),
    );
  }
}

async function tools() {
  const data = await api("/api/tools");
  const table = clear($("#tool-list"));
  table.append(el("tr", {}, ["tool", "level", "exposed", "what it does"].map((h) => el("th", {}, h))));
  for (const t of data.tools) {
    table.append(
      el(
        "tr",
        {},
        el("td", {}, el("code", {}, t.name)),
        el("td", {}, el("span", { class: `tag level-${t.level}` }, t.level)),
        el("td", {}, t.expose),
        el("td", {}, t.description),
      ),
    );
  }
}

export function init() {
  $("#usage-refresh").addEventListener("click", refresh);
  $("#usage-days").addEventListener("change", refresh);
}
