// The console's entry point: the tabs, the key field, and the polling that keeps the views fresh
// while the page is visible (a hidden tab polls nothing; the server never pushes).

import { apiKey, setApiKey } from "./api.js";
import { $, status } from "./dom.js";
import { clearLogs, refreshLogs } from "./logs.js";
import { ModelsView } from "./models.js";
import { TrafficView } from "./traffic.js";
import { TryView } from "./tryit.js";

const POLL_MS = 3000;
const tryView = new TryView();
const models = new ModelsView((list, info) => tryView.models(list, info));
const traffic = new TrafficView();
let view = "models";
let refused = false; // the server refused our key: wait for another before asking again
let timer = null;

function explain(error) {
  if (error.status === 401) {
    refused = true;
    clearLogs();
    traffic.reset();
    tryView.forget();
    const message = apiKey()
      ? `The server refused this API key (${error.message}). Enter another key above.`
      : "This server needs an API key: enter it above.";
    status(message);
  } else {
    status(error.message);
  }
}

// Refreshes run one after another: a slow answer for an old key never lands after a newer one.
let queue = Promise.resolve();

function refresh() {
  queue = queue.then(refreshOnce);
  return queue;
}

async function refreshOnce() {
  if (refused) return;
  try {
    if (view === "models" || view === "try") await models.refresh();
    await traffic.poll();
    if (view === "traffic") traffic.draw();
    if (view === "logs") await refreshLogs();
    status("");
  } catch (error) {
    explain(error);
  }
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    if (!document.hidden) await refresh();
    schedule();
  }, POLL_MS);
}

function show(name) {
  view = name;
  for (const button of $("tabs").querySelectorAll("button")) button.classList.toggle("active", button.dataset.view === name);
  for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== `view-${name}`;
  refresh().then(schedule);
}

function keyChanged() {
  refused = false;
  traffic.reset();
  $("api-key").value = ""; // the key is kept in sessionStorage, never left in the page
  $("api-key").placeholder = apiKey() ? "a key is in use (this tab only)" : "only if the server has one";
  refresh().then(schedule);
}

$("tabs").addEventListener("click", (event) => {
  const name = event.target.dataset && event.target.dataset.view;
  if (name) show(name);
});
$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  setApiKey($("api-key").value.trim());
  keyChanged();
});
$("forget-key").addEventListener("click", () => {
  setApiKey("");
  keyChanged();
});
$("logs-refresh").addEventListener("click", () => refreshLogs().catch(explain));
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) refresh().then(schedule);
});
keyChanged();
