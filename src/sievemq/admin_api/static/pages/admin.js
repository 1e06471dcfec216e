// Admin, as RabbitMQ's: Users (and their permissions), Virtual Hosts, Policies, Limits.
// Every form goes to the management API and shows its validation message when refused.

import { api, danger, enc, field, fmt, form, h, parseJson, table } from "../lib.js";

export const TABS = [["users", "Users"], ["vhosts", "Virtual Hosts"], ["policies", "Policies"], ["limits", "Limits"]];
const reload = () => window.dispatchEvent(new HashChangeEvent("hashchange"));

function tabs(active) {
  return h("nav", { class: "tabs" }, TABS.map(([key, title]) =>
    h("a", { href: `#/admin/${key}`, class: key === active ? "active" : null }, title)));
}

async function users() {
  const [list, perms, vhosts] = await Promise.all([api("/api/users"), api("/api/permissions"), api("/api/vhosts")]);
  const names = list.map((u) => u.name), vnames = vhosts.map((v) => v.name);
  return [
    h("h2", {}, "All users"),
    h("div", { id: "users" }, table([
      ["name", (u) => u.name], ["tags", (u) => u.tags.join(", ")], ["hashing", (u) => u.hashing_algorithm],
      ["can access", (u) => perms.filter((p) => p.user === u.name).map((p) => p.vhost).join(", ")],
      ["", (u) => danger("Delete", `Delete user ${u.name}?`, async () => {
        await api(`/api/users/${enc(u.name)}`, { method: "DELETE" }); reload();
      }, { "data-user": u.name })],
    ], list)),
    h("h2", {}, "Add or change a user"),
    form("add-user", [
      field("name", "name", { required: true }),
      field("password", "password", { type: "password" }),
      field("tags", "tags", { placeholder: "administrator, management, monitoring" }),
      field("vhost", "vhost", {}, [...vnames, "(none)"]),
    ], "Add user", async (d) => {
      const body = { tags: d.tags };  // no password typed: a user's password is left as it is
      if (d.password) body.password = d.password;
      await api(`/api/users/${enc(d.name)}`, { method: "PUT", body });
      if (d.vhost !== "(none)") {
        await api(`/api/permissions/${enc(d.vhost)}/${enc(d.name)}`, {
          method: "PUT", body: { configure: ".*", write: ".*", read: ".*" },
        });
      }
      reload();
    }),
    h("h2", {}, "Permissions"),
    h("div", { id: "permissions" }, table([
      ["user", (p) => p.user], ["vhost", (p) => p.vhost], ["configure", (p) => p.configure],
      ["write", (p) => p.write], ["read", (p) => p.read],
      ["", (p) => danger("Clear", null, async () => {
        await api(`/api/permissions/${enc(p.vhost)}/${enc(p.user)}`, { method: "DELETE" }); reload();
      })],
    ], perms)),
    form("set-permission", [
      field("user", "user", {}, names), field("vhost", "vhost", {}, vnames),
      field("configure", "configure", { value: ".*", size: 8 }), field("write", "write", { value: ".*", size: 8 }),
      field("read", "read", { value: ".*", size: 8 }),
    ], "Set permission", async (d) => {
      await api(`/api/permissions/${enc(d.vhost)}/${enc(d.user)}`, {
        method: "PUT", body: { configure: d.configure, write: d.write, read: d.read },
      });
      reload();
    }),
  ];
}

async function vhosts() {
  const list = await api("/api/vhosts");
  return [
    h("h2", {}, "All virtual hosts"),
    h("div", { id: "vhosts" }, table([
      ["name", (v) => v.name], ["description", (v) => v.description || ""],
      ["tags", (v) => (v.tags || []).join(", ")], ["default queue type", (v) => v.default_queue_type || ""],
      ["ready", (v) => fmt(v.messages_ready), true], ["unacked", (v) => fmt(v.messages_unacknowledged), true],
      ["total", (v) => fmt(v.messages), true],
      ["", (v) => danger("Delete", `Delete virtual host ${v.name} and everything in it?`, async () => {
        await api(`/api/vhosts/${enc(v.name)}`, { method: "DELETE" }); reload();
      }, { "data-vhost": v.name })],
    ], list)),
    h("h2", {}, "Add a new virtual host"),
    form("add-vhost", [
      field("name", "name", { required: true }), field("description", "description", { size: 20 }),
      field("tags", "tags", { size: 12, placeholder: "a, b" }),
      field("default queue type", "default_queue_type", {}, ["classic", "quorum", "stream"]),
    ], "Add / update virtual host", async (d) => {
      await api(`/api/vhosts/${enc(d.name)}`, {
        method: "PUT", body: { description: d.description, tags: d.tags, default_queue_type: d.default_queue_type },
      });
      reload();
    }),
  ];
}

async function policies() {
  const [list, vh] = await Promise.all([api("/api/policies"), api("/api/vhosts")]);
  return [
    h("h2", {}, "User policies"),
    h("div", { id: "policies" }, table([
      ["vhost", (p) => p.vhost], ["name", (p) => p.name], ["pattern", (p) => p.pattern],
      ["apply to", (p) => p["apply-to"]], ["definition", (p) => JSON.stringify(p.definition)],
      ["priority", (p) => p.priority, true],
      ["", (p) => danger("Delete", `Delete policy ${p.name}?`, async () => {
        await api(`/api/policies/${enc(p.vhost)}/${enc(p.name)}`, { method: "DELETE" }); reload();
      }, { "data-policy": p.name })],
    ], list, "no policies")),
    h("h2", {}, "Add or update a policy"),
    form("add-policy", [
      field("vhost", "vhost", {}, vh.map((v) => v.name)), field("name", "name", { required: true }),
      field("pattern", "pattern", { required: true, placeholder: "^orders\\." }),
      field("apply to", "apply-to", {}, ["all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams"]),
      field("priority", "priority", { type: "number", value: 0, size: 4 }),
      field("definition (JSON)", "definition", { required: true, size: 30, placeholder: '{"max-length": 1000}' }),
    ], "Add / update policy", async (d) => {
      await api(`/api/policies/${enc(d.vhost)}/${enc(d.name)}`, {
        method: "PUT", body: { pattern: d.pattern, "apply-to": d["apply-to"], priority: Number(d.priority || 0),
          definition: parseJson(d.definition, "Definition") },
      });
      reload();
    }),
  ];
}

function limitRows(list, who, path) {
  const rows = list.flatMap((l) => Object.entries(l.value).map(([name, value]) => ({ owner: l[who], name, value })));
  return table([
    [who, (r) => r.owner], ["limit", (r) => r.name], ["value", (r) => fmt(r.value), true],
    ["", (r) => danger("Clear", null, async () => {
      await api(`/api/${path}/${enc(r.owner)}/${enc(r.name)}`, { method: "DELETE" }); reload();
    })],
  ], rows, "no limits");
}

async function limits() {
  const [vl, ul, vh, us] = await Promise.all([
    api("/api/vhost-limits"), api("/api/user-limits"), api("/api/vhosts"), api("/api/users"),
  ]);
  const set = (path) => async (d) => {
    await api(`/api/${path}/${enc(d.owner)}/${enc(d.limit)}`, { method: "PUT", body: { value: /^-?\d+$/.test(d.value) ? Number(d.value) : d.value } });
    reload();
  };
  return [
    h("h2", {}, "Virtual host limits"),
    h("div", { id: "vhost-limits" }, limitRows(vl, "vhost", "vhost-limits")),
    form("set-vhost-limit", [
      field("vhost", "owner", {}, vh.map((v) => v.name)), field("limit", "limit", {}, ["max-connections", "max-queues"]),
      field("value", "value", { required: true, size: 8 }),
    ], "Set / update limit", set("vhost-limits")),
    h("h2", {}, "User limits"),
    h("div", { id: "user-limits" }, limitRows(ul, "user", "user-limits")),
    form("set-user-limit", [
      field("user", "owner", {}, us.map((u) => u.name)), field("limit", "limit", {}, ["max-connections", "max-channels"]),
      field("value", "value", { required: true, size: 8 }),
    ], "Set / update limit", set("user-limits")),
  ];
}

const SECTIONS = { users, vhosts, policies, limits };

export async function admin(tab = "users") {
  const section = SECTIONS[tab] ? tab : "users";
  const title = TABS.find(([k]) => k === section)[1];
  return { title: `Admin: ${title}`, nodes: [h("h1", {}, "Admin"), tabs(section), ...(await SECTIONS[section]())] };
}
