// The Traffic view: the server's /metrics, read by this page every few seconds while it is open
// and visible; every rate and quantile is computed here from two consecutive scrapes, so the
// server does no work for the console when no browser is looking.

import { request } from "./api.js";
import { $ } from "./dom.js";
import { Plot } from "./plot.js";
import { buckets, max, parse, quantile, sum, sumBy } from "./prom.js";

const WINDOW_MS = 5 * 60 * 1000;

// Each plot: its title, data-metric name, unit, and its series from (previous, current, seconds).
const PLOTS = [
  ["Requests / s", "requests_per_second", "", (a, b, dt) => ({ requests: rate(a, b, dt, "ovserve_requests_total") })],
  ["Tokens / s", "tokens_per_second", "", (a, b, dt) => ({
    generated: rate(a, b, dt, "ovserve_generation_tokens_total"),
    prompt: rate(a, b, dt, "ovserve_prompt_tokens_total"),
  })],
  ["Time to first token", "ttft_seconds", " s", (a, b) => {
    const before = buckets(a, "ovserve_time_to_first_token_seconds");
    const after = buckets(b, "ovserve_time_to_first_token_seconds");
    return { p50: quantile(0.5, before, after), p95: quantile(0.95, before, after) };
  }],
  ["Queue", "queue", "", (a, b) => ({
    waiting: sum(b, "ovserve_requests_waiting"),
    running: sum(b, "ovserve_requests_running"),
  })],
  ["KV cache in use", "kv_cache_usage", " %", (a, b) => {
    const ratio = max(b, "ovserve_kv_cache_usage_ratio");
    return { "busiest model": ratio === null ? null : ratio * 100 };
  }],
  ["Errors / s by status", "errors_per_second", "", (a, b, dt) => {
    const failed = (labels) => Number(labels.status) >= 400;
    const before = sumBy(a, "ovserve_requests_total", "status", failed);
    const after = sumBy(b, "ovserve_requests_total", "status", failed);
    const series = {};
    for (const [code, count] of Object.entries(after)) series[code] = Math.max(0, count - (before[code] || 0)) / dt;
    return Object.keys(series).length ? series : { none: 0 };
  }],
  ["Engine restarts (total)", "engine_restarts", "", (a, b) => ({ restarts: sum(b, "ovserve_engine_restarts_total") })],
];

function rate(a, b, dt, name) {
  return Math.max(0, sum(b, name) - sum(a, name)) / dt; // a counter reset (restart) reads as 0
}

export class TrafficView {
  constructor() {
    this.plots = PLOTS.map(([title, metric, unit]) => new Plot(title, metric, unit));
    this.history = PLOTS.map(() => ({})); // per plot: {series: [[time, value]]}
    this.previous = null;
    $("plots").replaceChildren(...this.plots.map((plot) => plot.node));
    this.draw();
  }

  // One scrape: a point on every plot (after the first, which only sets the baseline).
  async poll() {
    const text = await (await request("/metrics")).text();
    const now = Date.now();
    const samples = parse(text);
    if (this.previous !== null) {
      const seconds = Math.max(0.001, (now - this.previous.time) / 1000);
      PLOTS.forEach(([, , , read], index) => {
        const values = read(this.previous.samples, samples, seconds);
        const history = this.history[index];
        for (const [name, value] of Object.entries(values)) {
          const points = (history[name] ||= []);
          points.push([now, value]);
          while (points.length && points[0][0] < now - WINDOW_MS) points.shift();
        }
      });
    }
    this.previous = { time: now, samples };
  }

  draw() {
    this.plots.forEach((plot, index) => plot.draw(this.history[index], WINDOW_MS));
  }

  reset() {
    this.previous = null;
    this.history = PLOTS.map(() => ({}));
    this.draw();
  }
}
