// Overview: totals, message rates and queued messages over time, what filtering saves.

import { filterCharts, lineChart, RATE_LABELS, rateValues } from "../charts.js";
import { api, fmt, h, rate, table, tiles } from "../lib.js";

function totals(o) {
  const t = o.object_totals, s = o.sievemq, q = o.queue_totals;
  return tiles([
    ["queues", fmt(t.queues)], ["messages", fmt(q.messages)],
    ["ready", fmt(q.messages_ready)], ["unacked", fmt(q.messages_unacknowledged)],
    ["publish rate", rate(o.message_stats.publish_details.rate)],
    ["deliver rate", rate(o.message_stats.deliver_get_details.rate)],
    ["connections", fmt(t.connections)], ["channels", fmt(t.channels)],
    ["consumers", fmt(t.consumers)], ["exchanges", fmt(t.exchanges)],
    ["uptime", `${Math.round(s.uptime_ms / 1000)} s`],
    ["alarms", s.alarms.length ? s.alarms.join(", ") : "none"],
  ]);
}

/** In a cluster: whose figures the totals add up, and how old each other node's part is. */
function sources(o) {
  const from = o.sievemq.totals_from || [];
  if (from.length < 2) return [];
  const others = from.slice(1).map((s) => `${s.node} ${Math.round(s.age_ms / 1000)} s old`);
  return [h("p", { class: "muted", id: "totals-from" },
    `Totals of ${from.length} nodes: ${from[0].node} live, ${others.join(", ")}`)];
}

function filterTiles(f) {
  const saved = f.bytes_unfiltered ? 1 - f.bytes_read / f.bytes_unfiltered : 0;
  return tiles([
    ["chunks scanned", fmt(f.chunks_scanned)], ["skipped by Bloom", fmt(f.chunks_skipped)],
    ["skipped by subscription", fmt(f.chunks_skipped_subscription)],
    ["false positives", fmt(f.chunks_false_positive)],
    ["messages skipped", fmt(f.records_skipped + f.records_skipped_by_bloom)],
    ["reads saved", `${Math.max(0, Math.round(saved * 100))} %`], ["SQL errors", fmt(f.sql_errors)],
  ]);
}

export async function overview() {
  const [o, past] = await Promise.all([api("/api/overview"), api("/api/overview/history")]);
  const rates = lineChart("overview:rates", "Message rates", RATE_LABELS);
  const depth = lineChart("overview:depth", "Queued messages", ["ready", "unacked", "total"], { unit: "" });
  const filters = filterCharts("overview:filter", o.sievemq.filter_stats);
  const box = h("div", { id: "totals" }, totals(o), ...sources(o));
  const fbox = h("div", { id: "filter-totals" }, filterTiles(o.sievemq.filter_stats));
  const add = (data) => {
    const q = data.queue_totals;
    rates.push(rateValues(data.message_stats));
    depth.push([q.messages_ready, q.messages_unacknowledged, q.messages]);
  };
  // the sampler's rounds of the last minutes, so the charts open with their past (this
  // node's own: in a cluster the live points are the cluster's totals, so no past there)
  const t = (p) => p.timestamp / 1000;
  if ((o.sievemq.totals_from || []).length > 1) past.length = 0;
  rates.seed(past.map((p) => [t(p), [p.publish_rate, p.confirm_rate, p.deliver_get_rate, p.ack_rate, p.redeliver_rate]]));
  depth.seed(past.map((p) => [t(p), [p.messages_ready, p.messages_unacknowledged, p.messages]]));
  add(o);
  return {
    title: "Overview",
    nodes: [
      h("h1", {}, "Overview"), box,
      h("div", { class: "charts" }, rates.el, depth.el),
      h("h2", {}, "Filtering"), fbox, filters.el,
      h("h2", {}, "Listeners"),
      h("div", { id: "listeners" }, table([["protocol", (l) => l.protocol], ["address", (l) => l.ip_address],
        ["port", (l) => l.port, true]], o.listeners)),
      h("p", { class: "muted" }, `${o.product_name} ${o.product_version} on ${o.node}`),
    ],
    async refresh() {
      const n = await api("/api/overview");
      box.replaceChildren(totals(n), ...sources(n));
      fbox.replaceChildren(filterTiles(n.sievemq.filter_stats));
      add(n);
      filters.push(n.sievemq.filter_stats);
    },
  };
}
