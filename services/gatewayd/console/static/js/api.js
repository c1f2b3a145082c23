// The page's one way to the console's API (SPEC §12.1, §12.3): same origin, JSON, and on every
// request the key that this tab's login was given, in `X-BX-Console`. The key is kept in this
// tab's sessionStorage (a reload keeps it; another tab, site or port never sees it), never in a
// cookie or localStorage. An answer that is not 2xx becomes an Error with its one line.

const STORED = "bx_console_key";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let onLoggedOut = () => {};

export function whenLoggedOut(callback) {
  onLoggedOut = callback;
}

/** This tab's key, or null before a login. */
export function key() {
  return sessionStorage.getItem(STORED);
}

/** The headers every /api request carries: the key, when there is one. */
export function keyed(headers = {}) {
  const kept = key();
  return kept ? { ...headers, "X-BX-Console": kept } : headers;
}

/** The key forgotten, and every view told (the cookie alone opens nothing). */
export function loggedOut() {
  sessionStorage.removeItem(STORED);
  onLoggedOut();
}

export async function login(token) {
  const answer = await api("POST", "/api/login", { token });
  if (!answer || typeof answer.key !== "string") throw new ApiError(0, "the login gave no key");
  sessionStorage.setItem(STORED, answer.key);
}

export async function api(method, path, body) {
  const options = { method, headers: keyed(), credentials: "same-origin", cache: "no-store" };
  if (method !== "GET") {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body ?? {});
  }
  let response;
  try {
    response = await fetch(path, options);
  } catch {
    throw new ApiError(0, "the console does not answer; is the box running?");
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    if (response.status === 401 && path !== "/api/login") loggedOut();
    const message = data && typeof data.error === "string" ? data.error : `HTTP ${response.status}`;
    throw new ApiError(response.status, message);
  }
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body);
export const del = (path) => api("DELETE", path);
