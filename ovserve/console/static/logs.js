// The Logs view: the server's recent warnings and errors (GET /console/api/logs, with the key).

import { getJSON } from "./api.js";
import { $, el } from "./dom.js";

export async function refreshLogs() {
  const answer = await getJSON("/console/api/logs");
  const rows = answer.data
    .slice()
    .reverse() // newest first
    .map((entry) =>
      el("tr", { class: `level-${entry.level}` },
        el("td", { text: new Date(entry.time * 1000).toLocaleString() }),
        el("td", { text: entry.level }),
        el("td", { text: entry.logger }),
        el("td", { text: entry.message }),
      ));
  $("log-rows").replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 4, text: "No warnings or errors." }))]));
}

export function clearLogs() {
  $("log-rows").replaceChildren();
}
