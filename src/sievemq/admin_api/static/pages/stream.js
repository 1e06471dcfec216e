// The page of one stream: storage facts, rates and length over time, what filtering saves
// (charts and per consumer), consumers of both protocols, named offsets, Bloom advice and
// the message browser (offset, timestamp, filter values, SQL).

import { filterCharts } from "../charts.js";
import { api, bytes, enc, fmt, h, kv, rate, table, tiles, when } from "../lib.js";
import { queueCharts } from "./queues.js";

function streamTiles(s) {
  return tiles([
    ["messages", fmt(s.messages)], ["bytes", fmt(s.bytes)], ["segments", fmt(s.segments)],
    ["chunks", fmt(s.chunks)], ["first offset", fmt(s.first_offset)], ["last offset", fmt(s.last_offset)],
    ["first timestamp", when(s.first_timestamp_ms)], ["last timestamp", when(s.last_timestamp_ms)],
    ["publish rate", rate(s.publish_rate)], ["deliver rate", rate(s.deliver_rate)],
  ]);
}

const pct = (part, whole) => (whole ? `${Math.round((100 * part) / whole)} %` : "–");

function consumerTable(consumers) {
  return table([
    ["tag", (c) => c.consumer_tag], ["connection", (c) => c.connection_name],
    ["name", (c) => c.consumer_name || ""],
    ["filter", (c) => (c.filter ? c.filter.values.join(", ") : c.sql || "")],
    ["prefetch", (c) => c.prefetch_count, true], ["lag", (c) => fmt(c.lag), true],
    ["delivered", (c) => fmt(c.filter_stats.messages_delivered), true],
    ["matched / read", (c) => `${fmt(c.filter_stats.records_matched)} / ${fmt(c.filter_stats.records_matched + c.filter_stats.records_skipped)}`, true],
    ["chunks skipped", (c) => fmt(c.filter_stats.chunks_skipped), true],
    ["bytes delivered", (c) => bytes(c.filter_stats.bytes_delivered), true],
    ["reads saved", (c) => pct((c.filter_stats.bytes_unfiltered ?? 0) - c.filter_stats.bytes_read, c.filter_stats.bytes_unfiltered), true],
  ], consumers, "no consumers");
}

export async function streamPage(vhost, name) {
  const base = `/api/streams/${enc(vhost)}/${enc(name)}`;
  const qbase = `/api/queues/${enc(vhost)}/${enc(name)}`;
  const [s, q, consumers, offsets, advice, streamConsumers] = await Promise.all([
    api(base), api(qbase), api(`${base}/consumers`), api(`${base}/offsets`),
    api(`${base}/filter-advice?target_fpr=0.01`), api(`/api/stream/consumers/${enc(vhost)}`),
  ]);
  const subscribers = streamConsumers.filter((c) => c.queue.name === name);
  const charts = queueCharts(`stream:${vhost}:${name}`);
  charts.push(q);
  const filters = filterCharts(`stream:${vhost}:${name}:filter`, s.filter_stats);
  const box = h("div", { id: "stream-totals" }, streamTiles(s));
  const cbox = h("div", { id: "consumers" }, consumerTable(consumers));
  const results = h("div", { id: "messages" });
  const browseForm = h("form", { class: "inline", id: "browse" },
    h("label", {}, "offset", h("input", { name: "offset", type: "number", min: 0, size: 8 })),
    h("label", {}, "timestamp (ISO or ms)", h("input", { name: "timestamp", size: 20 })),
    h("label", {}, "filter values", h("input", { name: "filter", size: 12 })),
    h("label", {}, "SQL", h("input", { name: "sql", size: 28 })),
    h("label", {}, "limit", h("input", { name: "limit", type: "number", min: 1, max: 1000, value: 20, size: 5 })),
    h("button", { type: "submit" }, "Read"));
  browseForm.addEventListener("submit", (e) => { e.preventDefault(); browse(base, browseForm, results); });
  await browse(base, browseForm, results);
  return {
    title: `Stream ${name}`,
    nodes: [
      h("h1", {}, `Stream ${name}`, h("span", { class: "muted" }, ` in ${vhost}`)),
      box, charts.el,
      h("h2", {}, "What filtering saves"), filters.el,
      h("h2", {}, "Arguments"), h("div", { class: "card" }, kv(s.arguments)),
      h("h2", {}, "Consumers"), cbox,
      h("h2", {}, "Stream-protocol consumers"),
      h("div", { id: "stream-consumers" }, table([
        ["connection", (c) => c.connection_details.name], ["subscription", (c) => c.subscription_id, true],
        ["state", (c) => (c.activity_status === "waiting" ? "waiting" : "active")],
        ["group", (c) => c.sievemq.single_active_consumer_group || ""],
        ["consumed", (c) => fmt(c.consumed), true], ["offset", (c) => fmt(c.offset), true],
        ["lag", (c) => fmt(c.offset_lag), true], ["credits", (c) => fmt(c.credits), true],
      ], subscribers, "no stream-protocol consumers")),
      h("h2", {}, "Named consumer offsets"),
      table([["consumer", (o) => o.consumer], ["offset", (o) => fmt(o.offset), true],
        ["lag", (o) => fmt(o.lag), true]], offsets, "no named consumers"),
      h("h2", {}, "Filter statistics"), h("div", { class: "card" }, kv(s.filter_stats)),
      h("h2", {}, "Bloom filter advice"),
      h("div", { class: "card", id: "advice" }, kv({
        "current size (bytes)": advice.current_filter_size_bytes,
        "current false-positive rate": advice.current_false_positive_rate.toFixed(4),
        "distinct values per chunk (p95)": advice.distinct_values_per_chunk_p95,
        "recommended size for 1 %": advice.recommended_filter_size_bytes,
        "RabbitMQ compatible": advice.rabbitmq_compatible,
        "chunks sampled": advice.chunks_sampled,
      })),
      h("h2", {}, "Messages"), browseForm, results,
    ],
    async refresh() {  // the message browser keeps what it shows until "Read"
      const [n, nq, nc] = await Promise.all([api(base), api(qbase), api(`${base}/consumers`)]);
      box.replaceChildren(streamTiles(n));
      charts.push(nq);
      filters.push(n.filter_stats);
      cbox.replaceChildren(consumerTable(nc));
    },
  };
}

async function browse(base, form, results) {
  const data = new FormData(form);
  const q = new URLSearchParams({ limit: data.get("limit") || "20" });
  const offset = data.get("offset"), ts = data.get("timestamp");
  if (offset) q.set("offset", offset);
  else if (ts) q.set("timestamp", /^\d+$/.test(ts) ? ts : String(Date.parse(ts)));
  else q.set("newest", "true");  // the newest messages, shown newest first
  for (const v of String(data.get("filter") || "").split(",").map((x) => x.trim()).filter(Boolean)) {
    q.append("filter", v);
  }
  if (data.get("sql")) q.set("sql", data.get("sql"));
  try {
    const r = await api(`${base}/messages?${q}`);
    const rows = [...r.messages].reverse();
    results.replaceChildren(
      h("p", { class: "muted" }, `${r.messages.length} message(s); next offset ${r.next_offset}` +
        (r.complete ? "" : ` (stopped by ${r.stopped_by}: continue from there)`)),
      table([
        ["offset", (m) => m.offset, true], ["time", (m) => when(m.timestamp_ms)],
        ["filter", (m) => m.filter_values.join(", ")], ["routing key", (m) => m.routing_key],
        ["properties", (m) => h("pre", {}, JSON.stringify(m.properties))],
        ["payload", (m) => h("pre", {}, (m.payload_encoding === "base64" ? "base64: " : "") + m.payload)],
      ], rows, "no messages"));
  } catch (err) {
    results.replaceChildren(h("p", { class: "error", role: "alert" }, err.message));
  }
}
