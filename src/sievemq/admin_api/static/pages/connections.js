// Connections and Channels, paged by the API, with the close button RabbitMQ has. In a
// cluster the API lists every node's; a Node column names where each one is (as RabbitMQ's).

import { api, danger, enc, fmt, h } from "../lib.js";
import { pagedList } from "../list.js";

async function nodeColumn() {
  const clustered = (await api("/api/nodes")).length > 1;
  return clustered ? [{ title: "Node", sort: "node", cell: (c) => c.node }] : [];
}

export async function connectionList() {
  const node = await nodeColumn();
  const list = pagedList({
    id: "connections", path: "/api/connections", empty: "no connections",
    columns: [
      { title: "Virtual host", sort: "vhost", cell: (c) => c.vhost },
      { title: "Name", sort: "name", cell: (c) => c.name },
      { title: "Client name", sort: "user_provided_name", cell: (c) => c.user_provided_name || "" },
      ...node,
      { title: "User", sort: "user", cell: (c) => c.user },
      { title: "Protocol", sort: "protocol", cell: (c) => c.protocol },
      { title: "Channels", sort: "channels", num: true, cell: (c) => fmt(c.channels) },
      { title: "State", sort: "state", cell: (c) => c.state },
      { title: "", cell: (c) => danger("Close", null, async () => {
        await api(`/api/connections/${enc(c.name)}`, {
          method: "DELETE", headers: { "X-Reason": "Closed from the SieveMQ dashboard" },
        });
        await list.reload();
      }, { "data-close": c.name }) },
    ],
  });
  await list.reload();
  return { title: "Connections", nodes: [h("h1", {}, "Connections"), list.el], refresh: list.reload };
}

export async function channelList() {
  const node = await nodeColumn();
  const list = pagedList({
    id: "channels", path: "/api/channels", empty: "no channels",
    columns: [
      { title: "Channel", sort: "name", cell: (c) => c.name },
      { title: "Virtual host", sort: "vhost", cell: (c) => c.vhost },
      ...node,
      { title: "User", sort: "user", cell: (c) => c.user },
      { title: "Mode", cell: (c) => (c.confirm ? "C" : "") + (c.transactional ? "T" : "") },
      { title: "State", sort: "state", cell: (c) => c.state },
      { title: "Prefetch", sort: "prefetch_count", num: true, cell: (c) => fmt(c.prefetch_count) },
      { title: "Unacked", sort: "messages_unacknowledged", num: true, cell: (c) => fmt(c.messages_unacknowledged) },
      { title: "Unconfirmed", sort: "messages_unconfirmed", num: true, cell: (c) => fmt(c.messages_unconfirmed) },
      { title: "Consumers", sort: "consumer_count", num: true, cell: (c) => fmt(c.consumer_count) },
    ],
  });
  await list.reload();
  return { title: "Channels", nodes: [h("h1", {}, "Channels"), list.el], refresh: list.reload };
}
