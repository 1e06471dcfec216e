// SieveMQ dashboard: plain ES modules, no build step. The URL's hash names the page
// (#/queues/%2F/orders), so a reload or a shared link opens the same page. Credentials:
// HTTP basic, kept in sessionStorage.

import { api, h, session } from "./lib.js";
import { admin } from "./pages/admin.js";
import { channelList, connectionList } from "./pages/connections.js";
import { exchangeList, exchangePage } from "./pages/exchanges.js";
import { nodeList } from "./pages/nodes.js";
import { overview } from "./pages/overview.js";
import { queueList, queuePage } from "./pages/queues.js";
import { streamPage } from "./pages/stream.js";

const main = document.getElementById("main");
// how often a page refreshes its figures and charts (RabbitMQ's UI: 5 s); tests shorten it
const REFRESH_MS = Number(sessionStorage.getItem("sievemq-refresh-ms")) || 5000;
let visit = 0;  // a page's refresh loop stops when another page is opened

/** The page the hash names: [nav key, async () => {title, nodes, refresh?}] */
function resolve(parts) {
  const [page, a, ...rest] = parts;
  const b = rest.join("/");
  switch (page) {
    case "nodes": return ["nodes", nodeList];
    case "connections": return ["connections", connectionList];
    case "channels": return ["channels", channelList];
    case "exchanges": return ["exchanges", b ? () => exchangePage(a, b) : exchangeList];
    case "queues": return ["queues", b ? () => queuePage(a, b) : queueList];
    case "streams": return ["queues", b ? () => streamPage(a, b) : queueList];
    case "admin": return ["admin", () => admin(a)];
    case "users": return ["admin", () => admin("users")];
    default: return ["overview", overview];
  }
}

async function route() {
  if (!session.auth) return;
  const path = location.hash.replace(/^#\/?/, "").split("?")[0];
  const parts = path.split("/").map(decodeURIComponent);
  const [nav, build] = resolve(parts);
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.page === nav);
  }
  const mine = ++visit;
  let page;
  try {
    page = await build();
  } catch (err) {
    if (mine !== visit) return;
    document.title = `Error | SieveMQ ${session.node}`;
    main.replaceChildren(h("p", { class: "error", role: "alert" }, err.message));
    return;
  }
  if (mine !== visit) return;  // another page was asked for meanwhile
  document.title = `${page.title} | SieveMQ ${session.node}`;
  main.replaceChildren(...page.nodes);
  if (page.refresh) loop(mine, page.refresh);
}

function loop(mine, refresh) {
  setTimeout(async () => {
    if (mine !== visit) return;
    try { await refresh(); } catch (_) { /* the next round tries again */ }
    loop(mine, refresh);
  }, REFRESH_MS);
}

async function login(user, password) {
  session.auth = btoa(unescape(encodeURIComponent(`${user}:${password}`)));
  const me = await api("/api/whoami");
  sessionStorage.setItem("sievemq-auth", session.auth);
  // the node's name, for the titles: asked once per tab (the overview is no small answer)
  session.node = sessionStorage.getItem("sievemq-node") || "";
  if (!session.node) {
    try { session.node = (await api("/api/overview")).node; } catch (_) { session.node = ""; }
    sessionStorage.setItem("sievemq-node", session.node);
  }
  document.getElementById("nav").hidden = false;
  document.getElementById("who").replaceChildren(
    h("span", { class: "node" }, session.node),
    ` ${me.name} (${me.tags.join(", ") || "no tags"})`,
    h("button", { onclick: () => { sessionStorage.clear(); location.reload(); } }, "Log out"));
  await route();
}

document.getElementById("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  const d = new FormData(e.target);
  try { await login(d.get("user"), d.get("password") || ""); } catch (err) {
    session.auth = null;
    document.getElementById("login-error").textContent = err.message;
  }
});
window.addEventListener("hashchange", route);
if (session.auth) {
  const [user, ...rest] = decodeURIComponent(escape(atob(session.auth))).split(":");
  login(user, rest.join(":")).catch(() => { session.auth = null; sessionStorage.removeItem("sievemq-auth"); });
}
