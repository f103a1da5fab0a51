// The Models view: every served model (GET /v3/models, with the key), its task and device
// (GET /console/api/info), load and unload (POSTs with the key), and the memory budget as a bar.

import { getJSON, postJSON } from "./api.js";
import { $, ago, bytes, el, status } from "./dom.js";

function stateCell(ovserve) {
  const cell = el("td", {}, el("span", { class: `state state-${ovserve.state}`, text: ovserve.state }));
  // load_stage: what a load is doing now ("starting", "compiling", "warming up"), and for how long.
  if (ovserve.load_stage) {
    const seconds = typeof ovserve.load_stage_seconds === "number" ? `, ${Math.round(ovserve.load_stage_seconds)} s` : "";
    cell.append(" ", el("span", { class: "stage", text: `(${ovserve.load_stage}${seconds})` }));
  }
  return cell;
}

function memoryCell(ovserve) {
  if (ovserve.memory_bytes !== null && ovserve.memory_bytes !== undefined) return el("td", { text: bytes(ovserve.memory_bytes) });
  const estimate = ovserve.memory_estimate_bytes;
  return el("td", { text: estimate ? `~${bytes(estimate)} (estimate)` : "–" });
}

export class ModelsView {
  // onChange(models, info): called after every refresh (the Try-it view follows the served tasks).
  constructor(onChange) {
    this.onChange = onChange;
    this.busy = new Set(); // models with a load or unload in flight
  }

  async refresh() {
    let list;
    let info = { models: [], memory: {} };
    try {
      list = await getJSON("/v3/models");
      info = await getJSON("/console/api/info");
    } catch (error) {
      if (!list) {
        // No key, or a wrong one: show nothing the server did not give us.
        $("model-rows").replaceChildren();
        this.drawBudget({});
        this.onChange([], info);
        throw error;
      }
    }
    const byId = new Map(info.models.map((model) => [model.id, model]));
    const rows = list.data.map((model) => this.row(model, byId.get(model.parent || model.id) || {}));
    $("model-rows").replaceChildren(...rows);
    this.drawBudget(info.memory);
    this.onChange(list.data, info);
  }

  row(model, details) {
    const ovserve = model.ovserve || {};
    const name = model.id;
    const busy = this.busy.has(name);
    const load = el("button", { type: "button", "data-testid": "model-load", disabled: busy || ovserve.state === "loaded", text: "Load" });
    const unload = el("button", { type: "button", "data-testid": "model-unload", disabled: busy || ovserve.pinned || ovserve.state === "unloaded", text: "Unload" });
    load.addEventListener("click", () => this.act(name, "load"));
    unload.addEventListener("click", () => this.act(name, "unload"));
    return el("tr", { "data-testid": "model-row", "data-model": name, "data-state": ovserve.state || "unknown" },
      el("td", { text: model.parent ? `${name} (adapter of ${model.parent})` : name }),
      el("td", { text: (details.task || "–").replaceAll("_", " ") }),
      stateCell(ovserve),
      memoryCell(ovserve),
      el("td", { text: ovserve.pinned ? "yes" : "no" }),
      el("td", { text: ago(ovserve.last_used) }),
      el("td", { text: ovserve.tool_parser || "–" }),
      el("td", { text: ovserve.reasoning_parser || "–" }),
      el("td", { text: details.device || "–" }),
      el("td", {}, load, " ", unload),
    );
  }

  async act(name, action) {
    this.busy.add(name);
    const done = this.refresh().catch(() => {}); // show the buttons disabled and "loading" at once
    try {
      await postJSON(`/v3/models/${encodeURIComponent(name)}/${action}`);
      status("");
    } catch (error) {
      status(`${action} ${name}: ${error.message}`);
    } finally {
      this.busy.delete(name);
      await done;
      await this.refresh().catch((error) => status(error.message));
    }
  }

  drawBudget(memory) {
    const fill = $("budget-fill");
    const text = $("budget-text");
    const used = memory.in_use_bytes;
    if (memory.budget_bytes) {
      const share = used / memory.budget_bytes;
      fill.style.width = `${Math.min(100, share * 100).toFixed(1)}%`;
      fill.classList.toggle("over", share > 1);
      text.textContent = `models' memory: ${bytes(used)} of the ${bytes(memory.budget_bytes)} budget`;
    } else {
      fill.style.width = "0";
      text.textContent = used === undefined ? "" : `models' memory: ${bytes(used)} (no --models_memory_budget set)`;
    }
    $("budget").hidden = used === undefined;
  }
}
