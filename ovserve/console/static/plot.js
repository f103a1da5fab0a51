// A small SVG line plot: one figure per metric, several series, redrawn from the history kept by
// the Traffic view. No library: a polyline per series, the y range from the data.

import { el } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#0068b5", "#c62828", "#1a7f37", "#b35900", "#6a1b9a", "#00838f", "#5d4037"];
const WIDTH = 400;
const HEIGHT = 140;
const PAD = { left: 44, right: 6, top: 8, bottom: 16 };

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

function label(value, unit) {
  if (value === 0) return `0${unit}`;
  const digits = Math.abs(value) >= 10 ? 0 : Math.abs(value) >= 1 ? 1 : 2;
  return `${value.toFixed(digits)}${unit}`;
}

export class Plot {
  // `metric` names it for automation (data-metric); `unit` is appended to the axis labels.
  constructor(title, metric, unit = "") {
    this.unit = unit;
    this.svg = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, preserveAspectRatio: "none", role: "img" });
    this.legend = el("div", { class: "legend" });
    this.node = el("figure", { "data-testid": "metrics-plot", "data-metric": metric },
      el("figcaption", { text: title }), this.svg, this.legend);
  }

  // series: {name: [[timeMs, value|null], ...]}; a null value is a gap.
  draw(series, windowMs) {
    const now = Date.now();
    const start = now - windowMs;
    let top = 0;
    for (const points of Object.values(series)) for (const [, v] of points) if (v !== null && v > top) top = v;
    top = top > 0 ? top * 1.1 : 1;
    const x = (t) => PAD.left + ((t - start) / windowMs) * (WIDTH - PAD.left - PAD.right);
    const y = (v) => HEIGHT - PAD.bottom - (v / top) * (HEIGHT - PAD.top - PAD.bottom);
    this.svg.replaceChildren(
      svg("line", { x1: PAD.left, y1: y(0), x2: WIDTH - PAD.right, y2: y(0), stroke: "#dfe2ea" }),
      svg("line", { x1: PAD.left, y1: y(top), x2: WIDTH - PAD.right, y2: y(top), stroke: "#eef0f4" }),
    );
    const axis = (value, at) => {
      const text = svg("text", { x: PAD.left - 4, y: at + 4, "text-anchor": "end", "font-size": 10, fill: "#5d6478" });
      text.textContent = label(value, this.unit);
      this.svg.append(text);
    };
    axis(0, y(0));
    axis(top, y(top));
    const minutes = svg("text", { x: WIDTH - PAD.right, y: HEIGHT - 3, "text-anchor": "end", "font-size": 10, fill: "#5d6478" });
    minutes.textContent = `last ${Math.round(windowMs / 60000)} min`;
    this.svg.append(minutes);
    this.legend.replaceChildren();
    Object.entries(series).forEach(([name, points], index) => {
      const colour = COLOURS[index % COLOURS.length];
      let run = [];
      const flush = () => {
        if (run.length > 1) this.svg.append(svg("polyline", { points: run.join(" "), fill: "none", stroke: colour, "stroke-width": 1.5 }));
        else if (run.length === 1) {
          const [cx, cy] = run[0].split(",");
          this.svg.append(svg("circle", { cx, cy, r: 1.8, fill: colour }));
        }
        run = [];
      };
      for (const [t, v] of points) {
        if (t < start) continue;
        if (v === null) flush();
        else run.push(`${x(t).toFixed(1)},${y(v).toFixed(1)}`);
      }
      flush();
      const last = [...points].reverse().find(([, v]) => v !== null);
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = colour;
      this.legend.append(el("span", {}, swatch, `${name}: ${last ? label(last[1], this.unit) : "–"}`));
    });
  }
}
