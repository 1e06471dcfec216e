"""The screenshots of the dashboard in docs/: `python -m bench.dashboard_screenshots [DIR]`
(`make screenshots`; DIR defaults to docs/; about two minutes).

A ``ServerProcess`` on a scratch data folder gets what a small node has: a filtered stream
with a filtered consumer reading it, classic and quorum queues with a publisher and a
consumer running, an exchange with bindings, a second vhost, a policy and a limit; chromium
(Playwright, Debian's binary) then opens every page, leaves the charts time to gather
points, and saves ``dashboard-<page>.png`` (and one page at a phone's 390 px width).
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pika

from sievemq.testing import ServerProcess
from sievemq.testing.dashboard import VIEWPORT, chromium_launch, log_in, submit_login

REFRESH_MS = 1000  # the pages refresh every second here (5 s for users): more points sooner
CHART_WAIT_S = 25  # how long the overview gathers points before its picture


def setup(server: ServerProcess) -> None:
    """Queues, a stream, an exchange, a vhost, a policy and a limit, as a user would."""
    with httpx.Client(base_url=server.admin_url, auth=("guest", "guest")) as http:
        http.put("/api/streams/%2F/orders", json={"arguments": {"x-stream-filter-size-bytes": 32}})
        for i in range(60):
            region = ("emea", "amer", "apac")[i % 3]
            body = {
                "payload": f'{{"order": {i}, "region": "{region}"}}',
                "filter_value": region,
                "properties": {"headers": {"region": region}},
            }
            http.post("/api/streams/%2F/orders/messages", json=body)
        for name, kind in (("invoices", "classic"), ("payments", "quorum"), ("audit", "classic")):
            http.put(f"/api/queues/%2F/{name}", json={"arguments": {"x-queue-type": kind}})
        http.put("/api/exchanges/%2F/events", json={"type": "topic", "durable": True})
        for queue, key in (("audit", "#"), ("invoices", "invoice.*")):
            http.post(f"/api/bindings/%2F/e/events/q/{queue}", json={"routing_key": key})
        http.put("/api/vhosts/staging")
        http.put(
            "/api/permissions/staging/guest", json={"configure": ".*", "write": ".*", "read": ".*"}
        )
        http.put(
            "/api/policies/%2F/cap-audit",
            json={"pattern": "^audit$", "apply-to": "queues", "definition": {"max-length": 10000}},
        )
        http.put("/api/vhost-limits/staging/max-queues", json={"value": 100})
        http.put("/api/users/monitor", json={"password": "pw", "tags": "monitoring"})


def traffic(server: ServerProcess, stop: threading.Event) -> None:
    """A publisher (confirms) and an acking consumer on "invoices", a consumer of "apac"
    orders, and new orders arriving, until ``stop``."""
    params = pika.ConnectionParameters(
        server.host, server.amqp_port, client_properties={"connection_name": "billing-service"}
    )
    conn = pika.BlockingConnection(params)
    pub, sub, orders = conn.channel(), conn.channel(), conn.channel()
    pub.confirm_delivery()
    sub.basic_qos(prefetch_count=20)
    sub.basic_consume("invoices", lambda c, m, p, b: c.basic_ack(m.delivery_tag))
    orders.basic_qos(prefetch_count=100)
    args = {"x-stream-offset": "first", "x-stream-filter": "apac"}
    orders.basic_consume("orders", lambda c, m, p, b: c.basic_ack(m.delivery_tag), arguments=args)
    http = httpx.Client(base_url=server.admin_url, auth=("guest", "guest"))
    n = 0
    while not stop.is_set():
        for _ in range(8):
            pub.basic_publish("events", "invoice.created", b'{"invoice": %d}' % n)
            pub.basic_publish("", "payments", b"payment")
            n += 1
        region = ("emea", "amer", "apac")[n % 3]
        http.post(
            "/api/streams/%2F/orders/messages",
            json={"payload": f"order {n}", "filter_value": region},
        )
        pause = time.monotonic() + 0.25  # about 60 messages a second
        while time.monotonic() < pause:
            conn.process_data_events(time_limit=0.05)
    http.close()
    conn.close()


def shoot(server: ServerProcess, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(**chromium_launch())
        page = browser.new_page(viewport=VIEWPORT)
        submit_login(page, server.admin_url, "guest", "wrong")
        page.wait_for_selector("#login-error:not(:empty)")
        page.screenshot(path=str(out / "dashboard-login.png"))
        page.close()
        context = browser.new_context(viewport=VIEWPORT)
        context.add_init_script(f"sessionStorage.setItem('sievemq-refresh-ms', '{REFRESH_MS}')")
        page = context.new_page()
        log_in(page, server.admin_url)
        base = server.admin_url + "/#/"

        def visit(where: str, name: str, wait_s: float = 1.5, **kw: Any) -> None:
            page.goto(base + where)
            page.wait_for_selector("main h1")
            time.sleep(wait_s)
            page.screenshot(path=str(out / f"dashboard-{name}.png"), full_page=True, **kw)

        visit("overview", "overview", CHART_WAIT_S)
        visit("queues", "queues")
        visit("queues/%2F/invoices", "queue", 12)
        visit("streams/%2F/orders", "stream", 12)
        visit("exchanges", "exchanges")
        visit("exchanges/%2F/events", "exchange")
        visit("nodes", "nodes")
        visit("connections", "connections")
        visit("channels", "channels")
        visit("admin/users", "admin-users")
        visit("admin/policies", "admin-policies")
        phone = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=1)
        phone.add_init_script(f"sessionStorage.setItem('sievemq-refresh-ms', '{REFRESH_MS}')")
        page = phone.new_page()
        log_in(page, server.admin_url)
        page.goto(base + "overview")
        time.sleep(6)
        page.screenshot(path=str(out / "dashboard-phone.png"), full_page=True)
        browser.close()


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs").resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sievemq-shots-") as tmp:
        server = ServerProcess(Path(tmp) / "data").start()
        stop = threading.Event()
        worker: threading.Thread | None = None
        try:
            setup(server)
            worker = threading.Thread(target=traffic, args=(server, stop), daemon=True)
            worker.start()
            shoot(server, out)
        finally:
            stop.set()
            if worker is not None:
                worker.join(10)
            server.stop()
    print(f"screenshots in {out}")


if __name__ == "__main__":
    main()
