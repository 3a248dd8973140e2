// The page's entry point: log in (the token goes to /login once and becomes an HttpOnly
// cookie), switch views, and hold the one event stream every view listens to.

import { api, ApiError, login, setCsrf } from "./api.js";
import * as approvals from "./approvals.js";
import * as chat from "./chat.js";
import { $ } from "./dom.js";
import * as memory from "./memory.js";
import * as schedules from "./schedules.js";
import * as settings from "./settings.js";
import * as usage from "./usage.js";

let stream = null;
let started = false;

function showLogin(message = "") {
  $("#app").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message;
  $("#login-token").focus();
  if (stream) stream.close();
}

function connect() {
  if (stream) stream.close();
  stream = new EventSource("/api/events");
  stream.onopen = () => {
    $("#connection").textContent = "live";
    $("#connection").className = "live";
  };
  stream.onmessage = (message) => {
    const event = JSON.parse(message.data);
    approvals.onEvent(event);
    chat.onEvent(event);
  };
  stream.onerror = async () => {
    $("#connection").textContent = "reconnecting…";
    $("#connection").className = "muted";
    if (stream.readyState === EventSource.CLOSED) {
      try {
        await api("/api/me");
        setTimeout(connect, 2000);
      } catch (err) {
        if (err instanceof ApiError && err.status === 401) showLogin("Logged out.");
      }
    }
  };
}

const views = {
  chat: () => {},
  memory: () => memory.show(),
  approvals: () => {},
  schedules: () => schedules.load(),
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
      await api("/api/logout", { method: "POST" });
      showLogin("Logged out.");
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
  try {
    const me = await api("/api/me");
    setCsrf(me.csrf);
    await start();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) showLogin();
    else showLogin(`Luna did not answer: ${err.message}`);
  }
}

boot();
