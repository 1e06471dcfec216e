// SieveMQ dashboard: plain DOM, no build step. Every text from the server goes through
// textContent (names may hold any character). Credentials: HTTP basic, kept in sessionStorage.

const main = document.getElementById("main");
const enc = (s) => encodeURIComponent(s);
let auth = sessionStorage.getItem("sievemq-auth");
let timer = null;

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}), Authorization: "Basic " + auth };
  if (options.body && typeof options.body !== "string") {
    options = { ...options, body: JSON.stringify(options.body) };
    headers["Content-Type"] = "application/json";
  }
  const r = await fetch(path, { ...options, headers });
  if (r.status === 401 && path === "/api/whoami") throw new Error("Login failed");
  if (!r.ok) {
    let reason = r.statusText;
    try { reason = (await r.json()).reason || reason; } catch (_) { /* empty body */ }
    throw new Error(`${r.status}: ${reason}`);
  }
  const body = await r.text();  // PUT answers 201/204 with an empty body
  return body ? JSON.parse(body) : null;
}

const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en"));
const when = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 23) : "–");
const rate = (r) => `${fmt(r)}/s`;

function table(columns, rows, empty = "none") {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, columns.map(([title, , num]) => h("th", { class: num ? "num" : null }, title)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell, num]) => {
      const v = cell(row);
      return h("td", { class: num ? "num" : null }, v);
    })))));
}

function tiles(items) {
  return h("div", { class: "tiles" }, items.map(([k, v]) =>
    h("div", { class: "tile", "data-key": k }, h("div", { class: "v" }, v), h("div", { class: "k" }, k))));
}

function kv(obj) {
  return h("dl", { class: "kv" }, Object.entries(obj).flatMap(([k, v]) =>
    [h("dt", {}, k), h("dd", {}, typeof v === "object" ? JSON.stringify(v) : String(v))]));
}

function show(...nodes) { main.replaceChildren(...nodes); }
function fail(err) { main.append(h("p", { class: "error", role: "alert" }, err.message)); }

// ----------------------------------------------------------------------------- pages

async function overview() {
  const o = await api("/api/overview");
  const t = o.object_totals, s = o.sievemq, f = s.filter_stats;
  show(
    h("h1", {}, "Overview"),
    tiles([
      ["streams", fmt(t.queues)], ["messages", fmt(o.queue_totals.messages)],
      ["publish rate", rate(o.message_stats.publish_details.rate)],
      ["deliver rate", rate(o.message_stats.deliver_get_details.rate)],
      ["connections", fmt(t.connections)], ["channels", fmt(t.channels)],
      ["consumers", fmt(t.consumers)], ["exchanges", fmt(t.exchanges)],
      ["uptime", `${Math.round(s.uptime_ms / 1000)} s`],
      ["alarms", s.alarms.length ? s.alarms.join(", ") : "none"],
    ]),
    h("h2", {}, "Filtering"),
    tiles([
      ["chunks scanned", fmt(f.chunks_scanned)], ["skipped by Bloom", fmt(f.chunks_skipped)],
      ["skipped by subscription", fmt(f.chunks_skipped_subscription)],
      ["false positives", fmt(f.chunks_false_positive)],
      ["messages skipped", fmt(f.records_skipped)], ["SQL errors", fmt(f.sql_errors)],
    ]),
    h("h2", {}, "Listeners"),
    table([["protocol", (l) => l.protocol], ["address", (l) => l.ip_address], ["port", (l) => l.port, true]],
      o.listeners),
    h("p", { class: "muted" }, `${o.product_name} ${o.product_version} on ${o.node}`),
  );
}

async function streams() {
  const list = await api("/api/streams");
  show(
    h("h1", {}, "Streams"),
    table([
      ["vhost", (s) => s.vhost],
      ["name", (s) => h("a", { href: `#/streams/${enc(s.vhost)}/${enc(s.name)}` }, s.name)],
      ["messages", (s) => fmt(s.messages), true], ["bytes", (s) => fmt(s.bytes), true],
      ["segments", (s) => fmt(s.segments), true], ["consumers", (s) => fmt(s.consumers), true],
      ["publish", (s) => rate(s.publish_rate), true], ["deliver", (s) => rate(s.deliver_rate), true],
    ], list, "no streams yet"),
  );
}

async function stream(vhost, name) {
  const base = `/api/streams/${enc(vhost)}/${enc(name)}`;
  const [s, consumers, offsets, advice, streamConsumers] = await Promise.all([
    api(base), api(`${base}/consumers`), api(`${base}/offsets`),
    api(`${base}/filter-advice?target_fpr=0.01`), api(`/api/stream/consumers/${enc(vhost)}`),
  ]);
  const subscribers = streamConsumers.filter((c) => c.queue.name === name);
  const results = h("div", { id: "messages" });
  const form = h("form", { class: "inline", id: "browse" },
    h("label", {}, "offset", h("input", { name: "offset", type: "number", min: 0, size: 8 })),
    h("label", {}, "timestamp (ISO or ms)", h("input", { name: "timestamp", size: 20 })),
    h("label", {}, "filter values", h("input", { name: "filter", size: 12 })),
    h("label", {}, "SQL", h("input", { name: "sql", size: 28 })),
    h("label", {}, "limit", h("input", { name: "limit", type: "number", min: 1, max: 1000, value: 20, size: 5 })),
    h("button", { type: "submit" }, "Read"));
  form.addEventListener("submit", (e) => { e.preventDefault(); browse(base, form, results); });
  show(
    h("h1", {}, `Stream ${name}`, h("span", { class: "muted" }, ` in ${vhost}`)),
    tiles([
      ["messages", fmt(s.messages)], ["bytes", fmt(s.bytes)], ["segments", fmt(s.segments)],
      ["chunks", fmt(s.chunks)], ["first offset", fmt(s.first_offset)], ["last offset", fmt(s.last_offset)],
      ["first timestamp", when(s.first_timestamp_ms)], ["last timestamp", when(s.last_timestamp_ms)],
      ["publish rate", rate(s.publish_rate)], ["deliver rate", rate(s.deliver_rate)],
    ]),
    h("h2", {}, "Arguments"), h("div", { class: "card" }, kv(s.arguments)),
    h("h2", {}, "Consumers"),
    table([
      ["tag", (c) => c.consumer_tag], ["connection", (c) => c.connection_name],
      ["name", (c) => c.consumer_name || ""],
      ["filter", (c) => (c.filter ? c.filter.values.join(", ") : c.sql || "")],
      ["prefetch", (c) => c.prefetch_count, true], ["lag", (c) => fmt(c.lag), true],
      ["delivered", (c) => fmt(c.filter_stats.messages_delivered), true],
      ["chunks skipped", (c) => fmt(c.filter_stats.chunks_skipped), true],
    ], consumers, "no consumers"),
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
    h("h2", {}, "Messages"), form, results,
  );
  await browse(base, form, results);
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

async function connections() {
  const list = await api("/api/connections");
  show(
    h("h1", {}, "Connections"),
    table([
      ["name", (c) => c.name], ["client name", (c) => c.user_provided_name || ""],
      ["user", (c) => c.user], ["vhost", (c) => c.vhost], ["channels", (c) => c.channels, true],
      ["state", (c) => c.state],
      ["", (c) => h("button", {
        class: "danger", "data-close": c.name, onclick: async () => {
          await api(`/api/connections/${enc(c.name)}`, {
            method: "DELETE", headers: { "X-Reason": "Closed from the SieveMQ dashboard" },
          });
          setTimeout(route, 200);
        },
      }, "Close")],
    ], list, "no connections"),
  );
}

async function users() {
  const [list, perms] = await Promise.all([api("/api/users"), api("/api/permissions")]);
  const form = h("form", { class: "inline", id: "add-user" },
    h("label", {}, "name", h("input", { name: "name", required: true })),
    h("label", {}, "password", h("input", { name: "password", type: "password", required: true })),
    h("label", {}, "tags", h("input", { name: "tags", placeholder: "management" })),
    h("label", {}, "vhost", h("input", { name: "vhost", value: "/" })),
    h("button", { type: "submit" }, "Add user"));
  const status = h("p", { role: "status" });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const d = new FormData(form);
    try {
      await api(`/api/users/${enc(d.get("name"))}`, {
        method: "PUT", body: { password: d.get("password"), tags: d.get("tags") },
      });
      await api(`/api/permissions/${enc(d.get("vhost"))}/${enc(d.get("name"))}`, {
        method: "PUT", body: { configure: ".*", write: ".*", read: ".*" },
      });
      route();
    } catch (err) { status.replaceChildren(h("span", { class: "error" }, err.message)); }
  });
  show(
    h("h1", {}, "Users"),
    table([["name", (u) => u.name], ["tags", (u) => u.tags.join(", ")],
      ["hashing", (u) => u.hashing_algorithm]], list),
    h("h2", {}, "Permissions"),
    table([["user", (p) => p.user], ["vhost", (p) => p.vhost], ["configure", (p) => p.configure],
      ["write", (p) => p.write], ["read", (p) => p.read]], perms),
    h("h2", {}, "Add a user"), form, status,
  );
}

// ----------------------------------------------------------------------------- routing

async function route() {
  if (!auth) return;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const page = parts[0] || "overview";
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.getAttribute("href") === `#/${page}`);
  }
  clearTimeout(timer);
  try {
    if (page === "streams" && parts.length >= 3) await stream(parts[1], parts.slice(2).join("/"));
    else if (page === "streams") await streams();
    else if (page === "connections") await connections();
    else if (page === "users") await users();
    else await overview();
  } catch (err) { fail(err); }
  if (page === "overview" || (page === "streams" && parts.length < 3)) {
    timer = setTimeout(route, 5000);  // lists refresh; a stream page waits for "Read"
  }
}

async function login(user, password) {
  auth = btoa(unescape(encodeURIComponent(`${user}:${password}`)));
  const me = await api("/api/whoami");
  sessionStorage.setItem("sievemq-auth", auth);
  document.getElementById("nav").hidden = false;
  document.getElementById("who").replaceChildren(
    `${me.name} (${me.tags.join(", ") || "no tags"})`,
    h("button", { onclick: () => { sessionStorage.removeItem("sievemq-auth"); location.reload(); } }, "Log out"));
  await route();
}

document.getElementById("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  const d = new FormData(e.target);
  try { await login(d.get("user"), d.get("password") || ""); } catch (err) {
    auth = null;
    document.getElementById("login-error").textContent = err.message;
  }
});
window.addEventListener("hashchange", route);
if (auth) {
  const [user, ...rest] = decodeURIComponent(escape(atob(auth))).split(":");
  login(user, rest.join(":")).catch(() => { auth = null; sessionStorage.removeItem("sievemq-auth"); });
}
