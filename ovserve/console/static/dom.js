// Building the page from server data: text always goes in as textContent, never as HTML
// (model output and log lines are hostile input).

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

export function $(id) {
  return document.getElementById(id);
}

export function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let size = value;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit += 1;
  }
  return `${size.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

export function ago(unixSeconds) {
  if (!unixSeconds) return "never";
  const seconds = Math.max(0, Date.now() / 1000 - unixSeconds);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return new Date(unixSeconds * 1000).toLocaleString();
}

// Shown in the status line: an error (red) or a note.
export function status(message, kind = "error") {
  const line = $("status");
  line.textContent = message || "";
  line.className = kind === "error" ? "" : "info";
  line.hidden = !message;
}
