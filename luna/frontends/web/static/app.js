// The page's entry point: log in (the token goes to /login once and becomes an HttpOnly
// cookie), switch views, and hold the one event stream every view listens to.

import { api, ApiError, forgetLogin, hasLogin, login, streamEvents } from "./api.js";
import * as approvals from "./approvals.js";
import * as chat from "./chat.js";
import { $ } from "./dom.js";
import * as memory from "./memory.js";
import * as schedules from "./schedules.js";
import * as settings from "./settings.js";
import * as skills from "./skills.js";
import * as usage from "./usage.js";

let stream = null; // AbortController of the open event stream
let started = false;

function isLoggedOut(err) {
  return err instanceof ApiError && (err.status === 401 || err.status === 403);
}

function showLogin(message = "") {
  if (stream) stream.abort();
  stream = null;
  forgetLogin();
  $("#app").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message;
  $("#login-token").focus();
}

function live(isLive) {
  $("#connection").textContent = isLive ? "live" : "reconnecting…";
  $("#connection").className = isLive ? "live" : "muted";
}

async function connect() {
  if (stream) stream.abort();
  const mine = new AbortController();
  stream = mine;
  try {
    await streamEvents(
      (event) => {
        approvals.onEvent(event);
        chat.onEvent(event);
      },
      () => live(true),
      mine.signal,
    );
  } catch (err) {
    if (mine.signal.aborted) return;
    if (isLoggedOut(err)) {
      showLogin("Logged out.");
      return;
    }
  }
  if (mine.signal.aborted) return;
  live(false);
  setTimeout(() => {
    if (stream === mine) connect();
  }, 2000);
}

const views = {
  chat: () => {},
  memory: () => memory.show(),
  approvals: () => {},
  schedules: () => schedules.load(),
  skills: () => skills.load(),
  usage: () => usage.refresh(),
  settings: () => settings.load(),
};

function showView(name) {
  for (const button of document.querySelectorAll("#tabs button")) {
    button.classList.toggle("active", button.dataset.view === name);
  }
  for (const view of Object.keys(views)) $(`#view-${view}`).hidden = view !== name;
  history.replaceState(null, "", `#${name}`);
  views[name]();
}

async function start() {
  $("#login").hidden = true;
  $("#app").hidden = false;
  if (!started) {
    started = true;
    for (const button of document.querySelectorAll("#tabs button")) {
      button.addEventListener("click", () => showView(button.dataset.view));
    }
    $("#logout").addEventListener("click", async () => {
      try {
        await api("/api/logout", { method: "POST" });
      } finally {
        showLogin("Logged out.");
      }
    });
    approvals.init();
    memory.init();
    schedules.init(chat.currentSession);
    usage.init();
    settings.init();
  }
  await chat.init();
  connect();
  const wanted = location.hash.slice(1);
  showView(wanted in views ? wanted : "chat");
}

async function boot() {
  $("#login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await login($("#login-token").value);
      $("#login-token").value = "";
      await start();
    } catch (err) {
      $("#login-error").textContent = err.status === 401 ? "Wrong token." : err.message;
    }
  });
  if (!hasLogin()) {
    showLogin();
    return;
  }
  try {
    await api("/api/me");
    await start();
  } catch (err) {
    if (isLoggedOut(err)) showLogin();
    else showLogin(`Luna did not answer: ${err.message}`);
  }
}

boot();
