// A server-side paged, sorted, filtered list, as RabbitMQ's UI shows queues: the API does the
// work (``page``, ``page_size``, ``name``, ``use_regex``, ``sort``, ``sort_reverse``,
// ``columns``), so 10,000 queues cost one page of rows. The state lives in the URL
// (``#/queues?page=2&sort=messages``): a reload or a shared link shows the same page.

import { api, h } from "./lib.js";

export const PAGE_SIZES = ["20", "50", "100", "500"];

export function params() {
  const q = location.hash.split("?")[1] || "";
  return new URLSearchParams(q);
}

function go(changes) {
  const q = params();
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === "" || v === false) q.delete(k); else q.set(k, String(v));
  }
  const base = location.hash.split("?")[0] || "#/";
  location.hash = q.toString() ? `${base}?${q}` : base;
}

/** A list that reloads in place (the page refresh calls ``reload``; a form beside it keeps
 * what was typed). columns: [{title, sort (an API field or null), cell(row), num, fields}] */
export function pagedList(opts) {
  const el = h("div", { class: "list", id: opts.id });
  return {
    el,
    async reload() {
      try {
        el.replaceChildren(...(await render(opts)));
      } catch (err) {  // e.g. an invalid regex: say so, and offer the list without the filter
        el.replaceChildren(h("p", { class: "error", role: "alert" }, err.message),
          h("a", { href: "#", onclick: (e) => { e.preventDefault(); go({ name: null, use_regex: null, page: null }); } },
            "Show the whole list"));
      }
    },
  };
}

async function render({ path, columns, defaultSort = "name", empty = "none" }) {
  const q = params();
  const page = Number(q.get("page") || 1), size = q.get("page_size") || "50";
  const sort = q.get("sort") || defaultSort, reverse = q.get("sort_reverse") === "true";
  const name = q.get("name") || "", regex = q.get("use_regex") === "true";
  const want = new URLSearchParams({ page: String(page), page_size: size, sort, sort_reverse: String(reverse) });
  if (name) { want.set("name", name); want.set("use_regex", String(regex)); }
  const fields = columns.flatMap((c) => c.fields || []);
  if (fields.length) want.set("columns", fields.join(","));
  let data;
  try {
    data = await api(`${path}?${want}`);
  } catch (err) {
    if (page > 1 && /Invalid pagination/.test(err.message)) { go({ page: null }); return []; }
    throw err;
  }
  const filter = h("form", { class: "inline filter" },
    h("label", {}, "Filter", h("input", { name: "name", value: name, size: 24, placeholder: "name" })),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: "use_regex", checked: regex || null }), "Regex"),
    h("label", {}, "Per page", h("select", { name: "page_size" },
      PAGE_SIZES.map((s) => h("option", { value: s, selected: s === size || null }, s)))),
    h("button", { type: "submit" }, "Apply"));
  filter.addEventListener("submit", (e) => {
    e.preventDefault();
    const d = new FormData(filter);
    go({ name: d.get("name"), use_regex: d.get("use_regex") ? "true" : null, page_size: d.get("page_size"), page: null });
  });
  filter.querySelector("select").addEventListener("change", () => filter.requestSubmit());
  const head = columns.map((c) => {
    if (!c.sort) return h("th", { class: c.num ? "num" : null }, c.title);
    const active = c.sort === sort;
    const arrow = active ? (reverse ? " ▼" : " ▲") : "";
    return h("th", { class: c.num ? "num" : null },
      h("a", { href: "#", class: active ? "sorted" : null, "data-sort": c.sort, onclick: (e) => {
        e.preventDefault();
        go({ sort: c.sort, sort_reverse: active && !reverse ? "true" : null, page: null });
      } }, c.title + arrow));
  });
  const rows = data.items.map((row) => h("tr", {}, columns.map((c) => h("td", { class: c.num ? "num" : null }, c.cell(row)))));
  const pager = h("div", { class: "pager" },
    h("button", { type: "button", disabled: page <= 1 || null, onclick: () => go({ page: page - 1 }) }, "‹ Previous"),
    h("span", { class: "muted" }, `Page ${data.page} of ${data.page_count}: ${data.filtered_count.toLocaleString("en")} ` +
      `shown of ${data.total_count.toLocaleString("en")}`),
    h("button", { type: "button", disabled: page >= data.page_count || null, onclick: () => go({ page: page + 1 }) }, "Next ›"));
  return [
    filter,
    data.items.length
      ? h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, head)), h("tbody", {}, rows)))
      : h("p", { class: "muted" }, name ? "nothing matches the filter" : empty),
    pager];
}
