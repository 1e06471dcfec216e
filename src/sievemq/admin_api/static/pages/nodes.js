// Nodes: every member of the cluster as /api/nodes lists it, in the columns of RabbitMQ's
// Overview node table (a single node lists itself). A stopped member shows its name only.

import { api, bytes, fmt, h, table } from "../lib.js";

/** "3d 4h", "4h 12m", "12m 5s", "5s": the two largest units, as RabbitMQ's UI. */
export function uptime(msecs) {
  if (msecs === null || msecs === undefined) return "–";
  let s = Math.floor(msecs / 1000);
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
    if (s >= size || (unit === "s" && !parts.length)) {
      parts.push(`${Math.floor(s / size)}${unit}`);
      s %= size;
    }
  }
  return parts.slice(0, 2).join(" ");
}

const of = (used, total, show = fmt) => (used === undefined ? "–" : `${show(used)} / ${show(total)}`);

const COLUMNS = [
  ["Name", (n) => h("span", { "data-node": n.name }, n.name)],
  ["Running", (n) => h("span", { class: n.running ? "ok" : "error" }, n.running ? "running" : "stopped")],
  ["File descriptors", (n) => of(n.fd_used, n.fd_total), true],
  ["Socket descriptors", (n) => of(n.sockets_used, n.sockets_total), true],
  ["Memory", (n) => of(n.mem_used, n.mem_limit, bytes) + (n.mem_alarm ? " (alarm)" : ""), true],
  ["Disk space free", (n) => of(n.disk_free, n.disk_free_limit, bytes) + (n.disk_free_alarm ? " (alarm)" : ""), true],
  ["Uptime", (n) => (n.running ? uptime(n.uptime) : "–"), true],
  ["Queues led", (n) => fmt(n.sievemq?.queues), true],
];

export async function nodeList() {
  const holder = h("div", { id: "nodes" });
  const refresh = async () => {
    const nodes = await api("/api/nodes");
    holder.replaceChildren(table(COLUMNS, nodes, "no nodes"));
  };
  await refresh();
  return { title: "Nodes", nodes: [h("h1", {}, "Nodes"), holder], refresh };
}
