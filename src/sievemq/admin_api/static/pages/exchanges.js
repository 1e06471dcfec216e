// Exchanges: the paged list with a declare form, and the page of one exchange (its bindings
// both ways, add and remove a binding, publish a message, delete).

import {
  api, danger, enc, exchangeHref, field, form, h, kv, link, parseJson, table,
} from "../lib.js";
import { pagedList } from "../list.js";

const shown = (name) => name || "(AMQP default)";

export async function exchangeList() {
  const list = pagedList({
    id: "exchanges", path: "/api/exchanges", empty: "no exchanges",
    columns: [
      { title: "Virtual host", sort: "vhost", cell: (x) => x.vhost },
      { title: "Name", sort: "name", cell: (x) => link(exchangeHref(x.vhost, x.name), shown(x.name)) },
      { title: "Type", sort: "type", cell: (x) => x.type },
      { title: "Features", cell: (x) => [x.durable ? "D" : "", x.auto_delete ? "AD" : "", x.internal ? "I" : ""].filter(Boolean).join(" ") },
      { title: "Policy", sort: "policy", cell: (x) => x.policy || "" },
    ],
  });
  const [, vh, ov] = await Promise.all([list.reload(), api("/api/vhosts"), api("/api/overview")]);
  const add = form("add-exchange", [
    field("Virtual host", "vhost", {}, vh.map((v) => v.name)),
    field("Name", "name", { required: true }),
    field("Type", "type", {}, ov.exchange_types.map((t) => t.name)),
    field("Durability", "durable", {}, ["Durable", "Transient"]),
    field("Arguments (JSON)", "arguments", { size: 24 }),
  ], "Add exchange", async (d) => {
    await api(`/api/exchanges/${enc(d.vhost)}/${enc(d.name)}`, {
      method: "PUT",
      body: { type: d.type, durable: d.durable === "Durable", arguments: parseJson(d.arguments, "Arguments") },
    });
    await list.reload();
    return `exchange ${d.name} declared`;
  });
  return {
    title: "Exchanges",
    nodes: [h("h1", {}, "Exchanges"), list.el, h("h2", {}, "Add a new exchange"), add],
    refresh: list.reload,
  };
}

function bindingRows(vhost, rows, other) {
  return table([
    [other === "source" ? "from" : "to", (b) => {
      const target = b[other];
      if (other === "destination" && b.destination_type === "queue") {
        return link(`#/queues/${enc(vhost)}/${enc(target)}`, target);
      }
      return link(exchangeHref(vhost, target), shown(target));
    }],
    ["kind", (b) => (other === "source" ? "exchange" : b.destination_type)],
    ["routing key", (b) => b.routing_key], ["arguments", (b) => JSON.stringify(b.arguments)],
    ["", (b) => (b.source ? danger("Unbind", null, async () => {
      const kind = b.destination_type === "queue" ? "q" : "e";
      await api(`/api/bindings/${enc(vhost)}/e/${enc(b.source)}/${kind}/${enc(b.destination)}/${enc(b.properties_key)}`,
        { method: "DELETE" });
      window.dispatchEvent(new HashChangeEvent("hashchange"));
    }) : "")],
  ], rows, "no bindings");
}

export async function exchangePage(vhost, name) {
  const real = name === "amq.default" ? "" : name;
  const base = `/api/exchanges/${enc(vhost)}/${enc(name)}`;
  const [x, from, to] = await Promise.all([
    api(base), api(`${base}/bindings/source`), api(`${base}/bindings/destination`),
  ]);
  const bind = form("add-binding", [
    field("To", "kind", {}, ["queue", "exchange"]),
    field("Name", "destination", { required: true }),
    field("Routing key", "routing_key"),
    field("Arguments (JSON)", "arguments", { size: 20 }),
  ], "Bind", async (d) => {
    const kind = d.kind === "queue" ? "q" : "e";
    await api(`/api/bindings/${enc(vhost)}/e/${enc(name)}/${kind}/${enc(d.destination)}`, {
      method: "POST", body: { routing_key: d.routing_key, arguments: parseJson(d.arguments, "Arguments") },
    });
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  });
  const publish = form("publish", [
    field("Routing key", "routing_key"),
    field("Payload", "payload", { size: 30 }),
    field("Headers (JSON)", "headers", { size: 20, placeholder: '{"k": "v"}' }),
    field("Delivery mode", "delivery_mode", {}, ["2 - persistent", "1 - non-persistent"]),
  ], "Publish message", async (d) => {
    const r = await api(`${base}/publish`, {
      method: "POST", body: { routing_key: d.routing_key, payload: d.payload, payload_encoding: "string",
        properties: { delivery_mode: Number(d.delivery_mode[0]), headers: parseJson(d.headers, "Headers") } },
    });
    return r.routed ? "Message published." : "Message published, but not routed.";
  });
  return {
    title: `Exchange ${shown(real)}`,
    nodes: [
      h("h1", {}, `Exchange ${shown(real)}`, h("span", { class: "muted" }, ` in ${vhost}`)),
      h("div", { class: "card" }, kv({ type: x.type, durable: x.durable, auto_delete: x.auto_delete,
        internal: x.internal, policy: x.policy || "", arguments: x.arguments })),
      h("h2", {}, "Bindings from this exchange"),
      h("div", { id: "bindings-source" }, bindingRows(vhost, from, "destination")),
      real ? bind : h("p", { class: "muted" }, "The default exchange binds every queue by its name."),
      h("h2", {}, "Bindings to this exchange"),
      h("div", { id: "bindings-destination" }, bindingRows(vhost, to, "source")),
      h("h2", {}, "Publish message"), publish,
      real && !real.startsWith("amq.") ? h("div", { class: "actions" },
        danger("Delete this exchange", `Delete exchange ${real}?`, async () => {
          await api(base, { method: "DELETE" });
          location.hash = "#/exchanges";
        }, { id: "delete-exchange" })) : null,
    ],
  };
}
