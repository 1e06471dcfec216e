// Line charts over the last minutes, drawn by uPlot (vendored, see vendor/uplot/README.md).
// Each chart's points are kept per key for the whole visit (a page left and opened again
// goes on where it was); a point is added on each refresh, from the API's own figures
// (the node's sampled ``*_details.rate``, lengths and counters).

import uPlot from "./vendor/uplot/uPlot.esm.js";
import { h } from "./lib.js";

const KEEP_S = 10 * 60;  // history kept per chart
const MIN_SPAN_S = 60;  // the time axis spans at least the last minute
const COLORS = ["#0b6bcb", "#12b76a", "#f79009", "#7a5af8", "#d92d20", "#0e9384"];
const store = new Map();  // key -> {x: [], ys: [[]...]}

function history(key, n) {
  let s = store.get(key);
  if (!s || s.ys.length !== n) { s = { x: [], ys: Array.from({ length: n }, () => []) }; store.set(key, s); }
  return s;
}

const axisValues = (unit) => (u, ticks) => ticks.map((v) => {
  if (unit === "bytes") {
    const k = ["B", "KiB", "MiB", "GiB"];
    let i = 0; while (Math.abs(v) >= 1024 && i < 3) { v /= 1024; i += 1; }
    return `${+v.toFixed(1)} ${k[i]}`;
  }
  return Math.abs(v) >= 1000 ? `${+(v / 1000).toFixed(1)}k` : `${+v.toFixed(1)}`;
});

/** A chart of ``labels`` over time; ``push(values)`` adds a point now. The element tells
 * tests and readers how many points it has (data-points) and the last values (data-last). */
export function lineChart(key, title, labels, { unit = "/s" } = {}) {
  const s = history(key, labels.length);
  const plotBox = h("div", { class: "plot" });
  const el = h("figure", { class: "chart", "data-chart": key },
    h("figcaption", {}, title, h("span", { class: "muted" }, unit === "/s" ? " (per second)" : "")),
    plotBox);
  const opts = {
    width: 560, height: 180, legend: { live: false },
    scales: { x: { time: true, auto: false }, y: { range: (u, min, max) => [Math.min(0, min), Math.max(1, max * 1.1)] } },
    axes: [{}, { values: axisValues(unit), size: unit === "bytes" ? 78 : 56 }],
    // every other line dashed, and the last: one that runs on top of another (acked =
    // delivered, total = ready) still shows
    series: [{}, ...labels.map((label, i) => ({ label, stroke: COLORS[i % COLORS.length], width: 2,
      dash: i % 2 || (i && i === labels.length - 1) ? [8, 4] : undefined, points: { size: 4 } }))],
  };
  const plot = new uPlot(opts, [s.x, ...s.ys], plotBox);
  const frame = () => {  // the time axis: the points kept, and at least the last minute
    const end = s.x.length ? s.x.at(-1) : Date.now() / 1000;
    plot.setScale("x", { min: Math.min(s.x[0] ?? end, end - MIN_SPAN_S), max: end });
  };
  frame();
  new ResizeObserver(() => {
    const w = plotBox.clientWidth;
    if (w > 0 && Math.abs(w - plot.width) > 2) plot.setSize({ width: w, height: 180 });
  }).observe(plotBox);
  const mark = () => {
    el.dataset.points = String(s.x.length);
    el.dataset.last = JSON.stringify(Object.fromEntries(labels.map((l, i) => [l, s.ys[i].at(-1) ?? null])));
  };
  mark();
  return {
    el,
    /** The node's own history ([seconds, values] oldest first), when this chart has none. */
    seed(points) {
      if (s.x.length) return;
      for (const [t, values] of points) { s.x.push(t); values.forEach((v, i) => s.ys[i].push(v ?? 0)); }
      plot.setData([s.x, ...s.ys]);
      frame();
      mark();
    },
    push(values) {
      const now = Date.now() / 1000;
      if (s.x.length && now - s.x.at(-1) < 0.15) {  // a page drawn again at once: one point
        s.x.pop(); s.ys.forEach((y) => y.pop());
      }
      s.x.push(now);
      values.forEach((v, i) => s.ys[i].push(v ?? 0));
      while (s.x.length && s.x[0] < now - KEEP_S) { s.x.shift(); s.ys.forEach((y) => y.shift()); }
      plot.setData([s.x, ...s.ys]);
      frame();
      mark();
    },
  };
}

/** The message-rate series RabbitMQ's UI draws, from an object's ``message_stats``. */
export const RATE_LABELS = ["published", "confirmed", "delivered", "acknowledged", "redelivered"];
export function rateValues(stats = {}) {
  const r = (k) => stats[`${k}_details`]?.rate ?? 0;
  return [r("publish"), r("confirm"), r("deliver_get"), r("ack"), r("redeliver")];
}

/** What filtering saves, from a stream's (or the node's) ``filter_stats`` counters. */
export function filterCharts(key, f) {
  const chunks = lineChart(`${key}:chunks`, "Chunks: scanned, skipped by Bloom", ["scanned", "skipped by Bloom"], { unit: "" });
  const msgs = lineChart(`${key}:msgs`, "Messages: read, matched, skipped unread",
    ["read", "matched", "skipped by Bloom (never read)"], { unit: "" });
  const bytesChart = lineChart(`${key}:bytes`, "Bytes: an unfiltered reader, read, delivered",
    ["unfiltered reader", "read", "delivered"], { unit: "bytes" });
  const push = (s) => {
    chunks.push([s.chunks_scanned, s.chunks_skipped]);
    msgs.push([s.records_matched + s.records_skipped, s.records_matched, s.records_skipped_by_bloom]);
    bytesChart.push([s.bytes_unfiltered ?? 0, s.bytes_read, s.bytes_delivered]);
  };
  push(f);
  return { el: h("div", { class: "charts", id: "filter-charts" }, chunks.el, msgs.el, bytesChart.el), push };
}
