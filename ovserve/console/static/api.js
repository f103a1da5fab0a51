// The console's only way to the server: same-origin fetches carrying the key the user typed.
// The key lives in sessionStorage (gone when the tab closes) and is never rendered into the page.

const KEY_NAME = "ovserve.apiKey";

export function apiKey() {
  return sessionStorage.getItem(KEY_NAME) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_NAME, key);
  else sessionStorage.removeItem(KEY_NAME);
}

// An answer the server refused: status and the message of its error body (OpenAI's shape).
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function headers(extra = {}) {
  const key = apiKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : { ...extra };
}

async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) message = typeof body.error === "string" ? body.error : body.error.message || message;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, message);
}

// fetch() with the key; a non-2xx answer throws an ApiError.
export async function request(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers || {}) });
  if (!response.ok) throw await errorOf(response);
  return response;
}

export async function getJSON(path) {
  return (await request(path)).json();
}

export async function postJSON(path, body) {
  const options = { method: "POST" };
  if (body !== undefined) {
    options.headers = { "Content-Type": "application/json" };
    options.body = JSON.stringify(body);
  }
  return (await request(path, options)).json();
}

// The data: payloads of a Server-Sent Events stream, parsed as JSON, as they arrive ("[DONE]" ends it).
export async function* sse(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, "");
      buffer = buffer.slice(end + 1);
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}
