// The page's one way to the console's API (SPEC §12.3): same origin, JSON, and the header
// every change must carry. An answer that is not 2xx becomes an Error with its one line.

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

export async function api(method, path, body) {
  const options = { method, headers: {}, credentials: "same-origin", cache: "no-store" };
  if (method !== "GET") {
    options.headers["Content-Type"] = "application/json";
    options.headers["X-BX-Console"] = "1";
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
    if (response.status === 401 && path !== "/api/login") onLoggedOut();
    const message = data && typeof data.error === "string" ? data.error : `HTTP ${response.status}`;
    throw new ApiError(response.status, message);
  }
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body);
export const del = (path) => api("DELETE", path);
