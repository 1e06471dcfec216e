// Queues and Streams: every queue type in one paged list, the page of a classic or quorum
// queue (charts, consumers, bindings, publish, get, purge, delete), and declaring a queue.

import { lineChart, RATE_LABELS, rateValues } from "../charts.js";
import {
  api, danger, enc, exchangeHref, field, fmt, form, h, kv, link, ms, parseJson, queueHref, rate,
  table, tiles,
} from "../lib.js";
import { pagedList } from "../list.js";

const QUEUE_FIELDS = ["name", "vhost", "type", "state", "messages_ready", "messages_unacknowledged",
  "messages", "consumers", "durable", "auto_delete", "exclusive", "policy",
  "message_stats.publish_details.rate", "message_stats.deliver_get_details.rate",
  "message_stats.ack_details.rate"];

function features(q) {
  return [q.durable ? "D" : null, q.auto_delete ? "AD" : null, q.exclusive ? "Excl" : null]
    .filter(Boolean).join(" ");
}

export async function queueList() {
  // in a cluster of several nodes, a Node column names each queue's leader (as RabbitMQ's)
  const clustered = (await api("/api/nodes")).length > 1;
  const node = clustered ? [{ title: "Node", sort: "node", cell: (q) => q.node, fields: ["node"] }] : [];
  const list = pagedList({
    id: "queues", path: "/api/queues", empty: "no queues yet",
    columns: [
      { title: "Virtual host", sort: "vhost", cell: (q) => q.vhost, fields: [] },
      { title: "Name", sort: "name", cell: (q) => link(queueHref(q), q.name), fields: QUEUE_FIELDS },
      ...node,
      { title: "Type", sort: "type", cell: (q) => q.type },
      { title: "Features", cell: features },
      { title: "State", sort: "state", cell: (q) => h("span", { class: `state ${q.state}` }, q.state) },
      { title: "Ready", sort: "messages_ready", num: true, cell: (q) => fmt(q.messages_ready) },
      { title: "Unacked", sort: "messages_unacknowledged", num: true, cell: (q) => fmt(q.messages_unacknowledged) },
      { title: "Total", sort: "messages", num: true, cell: (q) => fmt(q.messages) },
      { title: "Incoming", sort: "message_stats.publish_details.rate", num: true, cell: (q) => rate(ms(q, "publish")) },
      { title: "Deliver / get", sort: "message_stats.deliver_get_details.rate", num: true, cell: (q) => rate(ms(q, "deliver_get")) },
      { title: "Ack", sort: "message_stats.ack_details.rate", num: true, cell: (q) => rate(ms(q, "ack")) },
      { title: "Consumers", sort: "consumers", num: true, cell: (q) => fmt(q.consumers) },
    ],
  });
  const [, vh] = await Promise.all([list.reload(), api("/api/vhosts")]);
  const vhosts = vh.map((v) => v.name);
  const add = form("add-queue", [
    field("Type", "type", {}, ["classic", "quorum", "stream"]),
    field("Virtual host", "vhost", {}, vhosts),
    field("Name", "name", { required: true }),
    field("Durability", "durable", {}, ["Durable", "Transient"]),
    field("Arguments (JSON)", "arguments", { placeholder: '{"x-max-length": 1000}', size: 28 }),
  ], "Add queue", async (d) => {
    const args = { ...parseJson(d.arguments, "Arguments"), "x-queue-type": d.type };
    await api(`/api/queues/${enc(d.vhost)}/${enc(d.name)}`, {
      method: "PUT", body: { durable: d.durable === "Durable", auto_delete: false, arguments: args },
    });
    await list.reload();
    return `queue ${d.name} declared`;
  });
  return {
    title: "Queues and Streams",
    nodes: [h("h1", {}, "Queues and Streams"), list.el, h("h2", {}, "Add a queue"), add],
    refresh: list.reload,
  };
}

export function queueCharts(key) {
  const rates = lineChart(`${key}:rates`, "Message rates", RATE_LABELS);
  const depth = lineChart(`${key}:depth`, "Queued messages", ["ready", "unacked", "total"], { unit: "" });
  return {
    el: h("div", { class: "charts" }, rates.el, depth.el),
    push(q) {
      rates.push(rateValues(q.message_stats));
      depth.push([q.messages_ready, q.messages_unacknowledged, q.messages]);
    },
  };
}

function queueTiles(q) {
  return tiles([
    ["type", q.type], ["state", q.state], ["ready", fmt(q.messages_ready)],
    ["unacked", fmt(q.messages_unacknowledged)], ["total", fmt(q.messages)],
    ["consumers", fmt(q.consumers)], ["incoming", rate(ms(q, "publish"))],
    ["deliver / get", rate(ms(q, "deliver_get"))], ["ack", rate(ms(q, "ack"))],
  ]);
}

export async function queuePage(vhost, name) {
  const base = `/api/queues/${enc(vhost)}/${enc(name)}`;
  const [q, bindings] = await Promise.all([api(base), api(`${base}/bindings`)]);
  const charts = queueCharts(`queue:${vhost}:${name}`);
  charts.push(q);
  const box = h("div", { id: "queue-totals" }, queueTiles(q));
  const got = h("div", { id: "got" });
  const getForm = form("get-messages", [
    field("Ack mode", "ackmode", {}, ["ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false"]),
    field("Encoding", "encoding", {}, ["auto", "base64"]),
    field("Messages", "count", { type: "number", min: 1, value: 1, size: 4 }),
  ], "Get messages", async (d) => {
    const list = await api(`${base}/get`, {
      method: "POST", body: { ackmode: d.ackmode, encoding: d.encoding, count: Number(d.count), truncate: 50000 },
    });
    got.replaceChildren(table([
      ["#", (m) => m.message_count, true], ["exchange", (m) => m.exchange], ["routing key", (m) => m.routing_key],
      ["redelivered", (m) => String(m.redelivered)],
      ["properties", (m) => h("pre", {}, JSON.stringify(m.properties))],
      ["payload", (m) => h("pre", {}, (m.payload_encoding === "base64" ? "base64: " : "") + m.payload)],
    ], list, "queue is empty"));
    return `${list.length} message(s)`;
  });
  const publish = form("publish-to-queue", [
    field("Payload", "payload", { size: 30 }),
    field("Headers (JSON)", "headers", { size: 20, placeholder: '{"k": "v"}' }),
    field("Delivery mode", "delivery_mode", {}, ["2 - persistent", "1 - non-persistent"]),
  ], "Publish message", async (d) => {
    const r = await api(`/api/exchanges/${enc(vhost)}/amq.default/publish`, {
      method: "POST", body: { routing_key: name, payload: d.payload, payload_encoding: "string",
        properties: { delivery_mode: Number(d.delivery_mode[0]), headers: parseJson(d.headers, "Headers") } },
    });
    return r.routed ? "Message published." : "Message published, but not routed.";
  });
  const bind = form("add-queue-binding", [
    field("From exchange", "source", { required: true }),
    field("Routing key", "routing_key"),
    field("Arguments (JSON)", "arguments", { size: 20 }),
  ], "Bind", async (d) => {
    await api(`/api/bindings/${enc(vhost)}/e/${enc(d.source)}/q/${enc(name)}`, {
      method: "POST", body: { routing_key: d.routing_key, arguments: parseJson(d.arguments, "Arguments") },
    });
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  });
  return {
    title: `Queue ${name}`,
    nodes: [
      h("h1", {}, `Queue ${name}`, h("span", { class: "muted" }, ` in ${vhost}`)),
      box, charts.el,
      h("h2", {}, "Details"),
      h("div", { class: "card" }, kv({ durable: q.durable, auto_delete: q.auto_delete, exclusive: q.exclusive,
        policy: q.policy || "", arguments: q.arguments, node: q.node })),
      h("h2", {}, "Consumers"),
      table([["channel", (c) => c.channel_details?.name ?? ""], ["tag", (c) => c.consumer_tag],
        ["ack required", (c) => String(c.ack_required)], ["prefetch", (c) => fmt(c.prefetch_count), true]],
      q.consumer_details || [], "no consumers"),
      h("h2", {}, "Bindings"),
      h("div", { id: "queue-bindings" }, table([
        ["from", (b) => (b.source ? link(exchangeHref(vhost, b.source), b.source) : "(default exchange)")],
        ["routing key", (b) => b.routing_key], ["arguments", (b) => JSON.stringify(b.arguments)],
        ["", (b) => (b.source ? danger("Unbind", null, async () => {
          await api(`/api/bindings/${enc(vhost)}/e/${enc(b.source)}/q/${enc(name)}/${enc(b.properties_key)}`, { method: "DELETE" });
          window.dispatchEvent(new HashChangeEvent("hashchange"));
        }) : "")],
      ], bindings)), bind,
      h("h2", {}, "Publish message"), publish,
      h("h2", {}, "Get messages"), h("p", { class: "muted" },
        "Getting messages is a destructive action: with a requeue ack mode they are put back, redelivered."),
      getForm, got,
      h("h2", {}, "Purge and delete"),
      h("div", { class: "actions" },
        danger("Purge messages", `Purge every message of ${name}?`, async () => {
          await api(`${base}/contents`, { method: "DELETE" });
          window.dispatchEvent(new HashChangeEvent("hashchange"));
        }, { id: "purge" }),
        danger("Delete queue", `Delete queue ${name}?`, async () => {
          await api(base, { method: "DELETE" });
          location.hash = "#/queues";
        }, { id: "delete-queue" })),
    ],
    async refresh() {
      const n = await api(base);
      box.replaceChildren(queueTiles(n));
      charts.push(n);
    },
  };
}
