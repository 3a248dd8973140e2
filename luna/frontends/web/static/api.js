// Talking to Luna's JSON API: same-origin fetch with the login cookie, plus this login's
// second secret (the CSRF token) on every request. The server hands that secret out once, in
// the answer to POST /login; the page keeps it in this origin's localStorage, which a page on
// another port of the same host cannot read (the cookie alone, which browsers send to every
// port, opens nothing). The access token itself is sent once, to /login, and never stored.

const CSRF_KEY = "luna.csrf";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function csrf() {
  return localStorage.getItem(CSRF_KEY);
}

export function hasLogin() {
  return Boolean(csrf());
}

export function forgetLogin() {
  localStorage.removeItem(CSRF_KEY);
}

function headers(extra = {}) {
  const out = { Accept: "application/json", ...extra };
  const token = csrf();
  if (token) out["X-CSRF-Token"] = token;
  return out;
}

async function failure(resp) {
  let data = null;
  try {
    data = await resp.json();
  } catch {
    data = null;
  }
  const message = (data && (data.error?.message || data.error)) || resp.statusText;
  return new ApiError(resp.status, String(message));
}

export async function api(path, { method = "GET", body } = {}) {
  // A FormData body (files) is sent as multipart: the browser writes its Content-Type.
  const isForm = body instanceof FormData;
  const resp = await fetch(path, {
    method,
    headers: headers(body === undefined || isForm ? {} : { "Content-Type": "application/json" }),
    body: body === undefined || isForm ? body : JSON.stringify(body),
    credentials: "same-origin",
  });
  if (!resp.ok) throw await failure(resp);
  try {
    return await resp.json();
  } catch {
    return null;
  }
}

export async function login(token) {
  const data = await api("/login", { method: "POST", body: { token } });
  localStorage.setItem(CSRF_KEY, data.csrf);
  return data;
}

// The live event stream (Server-Sent Events read through fetch, since EventSource cannot send
// the CSRF header). Resolves when the server ends the stream; rejects with ApiError when it
// refuses it, or with the network's error.
export async function streamEvents(onEvent, onOpen, signal) {
  const resp = await fetch("/api/events", {
    headers: headers({ Accept: "text/event-stream" }),
    credentials: "same-origin",
    cache: "no-store",
    signal,
  });
  if (!resp.ok) throw await failure(resp);
  onOpen();
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data: "))
        .map((line) => line.slice(6))
        .join("\n");
      if (data) onEvent(JSON.parse(data));
    }
  }
}
