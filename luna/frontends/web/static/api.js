// Talking to Luna's JSON API: same-origin fetch with the login cookie; every state-changing
// request carries this login's CSRF token. The access token itself is sent once, to /login,
// and never stored by the page.

let csrf = null;

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function setCsrf(token) {
  csrf = token;
}

export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
  const resp = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  let data = null;
  try {
    data = await resp.json();
  } catch {
    data = null;
  }
  if (!resp.ok) {
    const message = (data && (data.error?.message || data.error)) || resp.statusText;
    throw new ApiError(resp.status, String(message));
  }
  return data;
}

export async function login(token) {
  const data = await api("/login", { method: "POST", body: { token } });
  setCsrf(data.csrf);
  return data;
}
