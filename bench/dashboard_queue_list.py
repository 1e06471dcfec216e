"""The "Queues and Streams" page with many queues: `python -m bench.dashboard_queue_list
[--queues 10000] [--calls 10]` (JSON out, a few minutes on a loaded machine).

A ``ServerProcess`` gets ``--queues`` queues declared over AMQP 0-9-1 (a third each classic,
quorum and stream), then:
- the API call the page makes (one page of 50 rows, sorted by name, its columns only), and
  the same sorted by messages and filtered by a regex: wall time per call, median;
- the page in chromium (Playwright): from opening ``#/queues`` to its 50 rows drawn, median
  of ``--calls`` loads (a full page load each: HTML, modules, login check, the list call).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pika

from bench._util import machine
from sievemq.testing import ServerProcess
from sievemq.testing.dashboard import VIEWPORT, chromium_launch, log_in

COLUMNS = (
    "name,vhost,type,state,messages_ready,messages_unacknowledged,messages,consumers,"
    "message_stats.publish_details.rate,message_stats.deliver_get_details.rate"
)
CALLS = {
    "page 1 by name": {"sort": "name"},
    "page 1 by messages, reversed": {"sort": "messages", "sort_reverse": "true"},
    "regex filter": {"name": "^q-0*12", "use_regex": "true", "sort": "name"},
}


def declare(server: ServerProcess, n: int) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters(server.host, server.amqp_port))
    ch = conn.channel()
    for i in range(n):
        kind = ("classic", "quorum", "stream")[i % 3]
        ch.queue_declare(f"q-{i:05d}", durable=True, arguments={"x-queue-type": kind})
    conn.close()


def api_ms(http: httpx.Client, params: dict[str, str], calls: int) -> float:
    query = {"page": "1", "page_size": "50", "columns": COLUMNS, **params}
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        r = http.get("/api/queues", params=query)
        times.append((time.perf_counter() - t) * 1000)
        r.raise_for_status()
    return round(statistics.median(times), 1)


def page_ms(server: ServerProcess, calls: int) -> float:
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(**chromium_launch())
        page = browser.new_context(viewport=VIEWPORT).new_page()
        log_in(page, server.admin_url)
        for _ in range(calls):
            t = time.perf_counter()
            page.goto(server.admin_url + "/#/queues?page_size=50")
            page.reload()  # a full load: the hash alone would not reload the document
            page.wait_for_function("document.querySelectorAll('#queues tbody tr').length === 50")
            times.append((time.perf_counter() - t) * 1000)
        browser.close()
    return round(statistics.median(times), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", type=int, default=10_000)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    out: dict[str, Any] = {"machine": machine(), "queues": args.queues}
    with tempfile.TemporaryDirectory(prefix="sievemq-qlist-") as tmp:
        server = ServerProcess(Path(tmp) / "data").start()
        try:
            t = time.perf_counter()
            declare(server, args.queues)
            out["declare_s"] = round(time.perf_counter() - t, 1)
            with httpx.Client(base_url=server.admin_url, auth=("guest", "guest")) as http:
                out["api_ms"] = {k: api_ms(http, v, args.calls) for k, v in CALLS.items()}
            out["page_load_ms"] = page_ms(server, args.calls)
        finally:
            server.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
