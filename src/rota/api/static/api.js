// Talking to the JSON API: every call is same-origin JSON, every failure an ApiError with the
// server's message. Paths are written from the dashboard's root ("/api/jobs"); the page says
// where that root is (data-root: the prefix a host app mounted it under, or "").

const ROOT = document.documentElement.dataset.root || "";

// A link to an API path (opened by the browser itself, with the dashboard's login cookie).
export function apiHref(path) {
  return ROOT + path;
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function request(method, path, body) {
  const headers = { Accept: "application/json" };
  const init = { method, headers, credentials: "same-origin", cache: "no-store" };
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    if (body !== undefined) init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(ROOT + path, init);
  } catch {
    throw new ApiError(0, "the server cannot be reached");
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const message = data && typeof data.error === "string" ? data.error : `HTTP ${response.status}`;
    throw new ApiError(response.status, message);
  }
  return data;
}

export const getJSON = (path) => request("GET", path);
export const postJSON = (path, body) => request("POST", path, body);
export const deleteJSON = (path) => request("DELETE", path);

// A query string from an object, leaving out empty values.
export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}
