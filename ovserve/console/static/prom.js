// Prometheus text exposition, read in the browser: samples, sums by label, and histogram quantiles
// from the bucket counts' change between two scrapes (as PromQL's histogram_quantile(rate(...))).

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

function unescape(value) {
  return value.replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
}

// [{name, labels: {...}, value}] of every sample line.
export function parse(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = SAMPLE.exec(line);
    if (!match) continue;
    const labels = {};
    if (match[2]) for (const [, name, value] of match[2].matchAll(LABEL)) labels[name] = unescape(value);
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

// The sum of a family's samples, optionally only those whose labels pass `keep`.
export function sum(samples, name, keep = () => true) {
  let total = 0;
  for (const sample of samples) if (sample.name === name && keep(sample.labels)) total += sample.value;
  return total;
}

export function max(samples, name) {
  let best = null;
  for (const sample of samples) if (sample.name === name) best = best === null ? sample.value : Math.max(best, sample.value);
  return best;
}

// A family's samples summed by the value of one label: {labelValue: total}.
export function sumBy(samples, name, label, keep = () => true) {
  const totals = {};
  for (const sample of samples) {
    if (sample.name !== name || !keep(sample.labels)) continue;
    const key = sample.labels[label];
    totals[key] = (totals[key] || 0) + sample.value;
  }
  return totals;
}

// A histogram's cumulative bucket counts summed over its series: [[upperBound, count]] sorted.
export function buckets(samples, name) {
  const counts = sumBy(samples, `${name}_bucket`, "le");
  return Object.entries(counts)
    .map(([le, count]) => [le === "+Inf" ? Infinity : Number(le), count])
    .sort((a, b) => a[0] - b[0]);
}

// The q-quantile of the observations made between two bucket lists (null: none were made).
// Linear inside the bucket, as Prometheus does; the +Inf bucket answers its lower bound.
export function quantile(q, before, after) {
  const previous = new Map(before);
  const delta = after.map(([bound, count]) => [bound, count - (previous.get(bound) || 0)]);
  const total = delta.length ? delta[delta.length - 1][1] : 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const [bound, count] of delta) {
    if (count >= rank) {
      if (bound === Infinity) return lowerBound;
      const inBucket = count - lowerCount;
      return inBucket > 0 ? lowerBound + ((bound - lowerBound) * (rank - lowerCount)) / inBucket : bound;
    }
    lowerBound = bound;
    lowerCount = count;
  }
  return lowerBound;
}
