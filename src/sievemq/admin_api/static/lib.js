// Shared pieces of the dashboard: DOM building, the API client, formatting, tables, forms.
// Every text from the server goes through textContent (names may hold any character).

export const enc = (s) => encodeURIComponent(s);
export const session = { auth: sessionStorage.getItem("sievemq-auth"), node: "" };

/** An element with attributes (on* are listeners) and children (strings become text). */
export function h(tag, attrs = {}, ...children) {
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

/** One management-API call; an error carries the API's own reason (its validation text). */
export async function api(path, options = {}) {
  const headers = { ...(options.headers || {}), Authorization: "Basic " + session.auth };
  if (options.body !== undefined && typeof options.body !== "string") {
    options = { ...options, body: JSON.stringify(options.body) };
    headers["Content-Type"] = "application/json";
  }
  const r = await fetch(path, { ...options, headers });
  if (r.status === 401 && path === "/api/whoami") throw new Error("Login failed");
  if (!r.ok) {
    let reason = r.statusText;
    try {
      const b = await r.json();
      reason = typeof b.reason === "string" ? b.reason : JSON.stringify(b.reason ?? b.error ?? reason);
    } catch (_) { /* empty body */ }
    throw new Error(`${r.status}: ${reason.trim()}`);
  }
  const body = await r.text();  // PUT answers 201/204 with an empty body
  return body ? JSON.parse(body) : null;
}

export const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en"));
export const when = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 23) : "–");
export const rate = (r) => `${fmt(r ?? 0)}/s`;
export const get = (obj, path) => path.split(".").reduce((o, k) => (o == null ? o : o[k]), obj);
export const ms = (o, key) => get(o, `message_stats.${key}_details.rate`);

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

/** A table from [title, cell(row), numeric?] columns; a note when there are no rows. */
export function table(columns, rows, empty = "none") {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("div", { class: "scroll" }, h("table", {},
    h("thead", {}, h("tr", {}, columns.map(([title, , num]) => h("th", { class: num ? "num" : null }, title)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell, num]) =>
      h("td", { class: num ? "num" : null }, cell(row))))))));
}

export function tiles(items) {
  return h("div", { class: "tiles" }, items.map(([k, v]) =>
    h("div", { class: "tile", "data-key": k }, h("div", { class: "v" }, v), h("div", { class: "k" }, k))));
}

export function kv(obj) {
  return h("dl", { class: "kv" }, Object.entries(obj).flatMap(([k, v]) =>
    [h("dt", {}, k), h("dd", {}, typeof v === "object" ? JSON.stringify(v) : String(v))]));
}

/** A labelled input (a select when ``options`` is a list). */
export function field(label, name, attrs = {}, options = null) {
  const input = options
    ? h("select", { name, ...attrs }, options.map((o) => h("option", { value: o }, o)))
    : h("input", { name, ...attrs });
  return h("label", {}, label, input);
}

/** A form whose submit runs ``action(values)``; the API's error (its reason) shows under it. */
export function form(id, fields, button, action) {
  const status = h("p", { class: "status", role: "status" });
  const el = h("form", { class: "inline", id }, fields, h("button", { type: "submit" }, button));
  el.addEventListener("submit", async (e) => {
    e.preventDefault();
    status.replaceChildren();
    try {
      const done = await action(Object.fromEntries(new FormData(el)));
      if (typeof done === "string") status.replaceChildren(h("span", { class: "ok" }, done));
    } catch (err) { status.replaceChildren(h("span", { class: "error", role: "alert" }, err.message)); }
  });
  return h("div", { class: "form" }, el, status);
}

/** A button that asks first, then runs ``action`` and shows its error beside it. */
export function danger(label, question, action, attrs = {}) {
  const b = h("button", { class: "danger", type: "button", ...attrs }, label);
  b.addEventListener("click", async () => {
    if (question && !confirm(question)) return;
    try { await action(); } catch (err) { b.after(h("span", { class: "error", role: "alert" }, ` ${err.message}`)); }
  });
  return b;
}

/** JSON typed in a form field: {} when empty, else an Error naming the field. */
export function parseJson(text, what) {
  if (!text || !text.trim()) return {};
  try { return JSON.parse(text); } catch (err) { throw new Error(`${what} is not JSON: ${err.message}`); }
}

export const link = (href, text) => h("a", { href }, text);
export const queueHref = (q) =>
  `#/${q.type === "stream" ? "streams" : "queues"}/${enc(q.vhost)}/${enc(q.name)}`;
export const exchangeHref = (vhost, name) => `#/exchanges/${enc(vhost)}/${enc(name || "amq.default")}`;
