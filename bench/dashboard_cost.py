"""What the web dashboard, open in a real browser, costs publishers:
`python -m bench.dashboard_cost [--pairs 5] [--n 200000] [--streams 100]` (JSON out, about
2-4 minutes on a quiet 2-core machine).

`sievemq serve` (``--fsync batch``) with ``--streams`` streams. Publish throughput is the
project's Go load generator (``bench/loadgen``, amqp091-go: 100 B bodies, confirms with a
window of 1,000, ``-unique-props -filter-values 50``) publishing ``--n`` messages into the
stream ``bench``, after one uncounted warm-up run. Each pair is one run alone and one with
the dashboard open (order alternating between pairs): Debian's chromium
(``/usr/bin/chromium``, driven by Playwright from PyPI; never ``playwright install``),
logged in, with two tabs: the overview (app.js refreshes it every 5 s) and the stream page
of ``bench`` (refreshed every 5 s: its facts, consumers, offsets, filter advice, and the
message browser's newest messages), as a person watching the publisher would. The browser is
started once; in the "alone" runs no page is open.

``--baseline-src DIR`` measures a server run from an older checkout's ``src/`` first, in
the same run (under ``"baseline"`` in the JSON): before/after a change.

Reported: the median publish rate of each side, the median of the pairs' drops (adjacent
runs, so load drift cancels), and the server's CPU per published message on each side (the
steadier figure on a loaded machine; it also leaves out the browser's own CPU, which on
this 2-core machine competes with the server and the load generator).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench import kit
from bench._util import machine, proc_cpu_s, start_server, stop_server
from sievemq.testing.dashboard import VIEWPORT, chromium_launch, log_in

REFRESH_S = 5.0
READ = "button:text-is('Read')"  # the stream page's message browser


def publish(port: int, pid: int, n: int) -> dict[str, float]:
    """One loadgen run: its publish rate and the server's CPU µs per message."""
    cpu0 = proc_cpu_s(pid)
    out = subprocess.run(
        [
            str(kit.loadgen()), "-port", str(port), "-mode", "publish", "-n", str(n),
            "-size", "100", "-window", "1000", "-unique-props", "-filter-values", "50",
            "-queue", "bench", "-keep",
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    cpu = proc_cpu_s(pid) - cpu0
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if "error" in result:
        raise RuntimeError(f"loadgen: {result['error']}")
    return {
        "rate": float(result["pub_msgs_per_s"]),
        "server_cpu_us_per_msg": 1e6 * cpu / max(1, int(result["published"])),
    }


class Dashboard:
    """Two logged-in tabs (overview, stream ``bench``), refreshed every ``REFRESH_S``
    while ``run`` is active; everything Playwright is on this one thread."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.requests = 0
        self.errors: list[str] = []

    def watch(self, browser: Any, stop: threading.Event, ready: threading.Event) -> None:
        context = browser.new_context(viewport=VIEWPORT)
        context.on("request", lambda r: self._count(r.url))
        try:
            pages = []
            for hash_ in ("#/overview", "#/streams/%2F/bench"):
                page = context.new_page()
                log_in(page, self.admin_url)
                page.goto(self.admin_url + "/" + hash_)
                page.on("pageerror", lambda e: self.errors.append(str(e)))
                pages.append(page)
            stream_page = pages[1]
            stream_page.wait_for_selector(READ)
            ready.set()
            while not stop.is_set():
                # the overview refreshes itself (app.js); the stream page is refreshed as a
                # watching person would: reload its facts, then read the newest messages
                stream_page.evaluate("window.dispatchEvent(new HashChangeEvent('hashchange'))")
                stream_page.wait_for_selector(READ)
                stream_page.click(READ)
                end = time.monotonic() + REFRESH_S
                while not stop.is_set() and time.monotonic() < end:
                    stream_page.wait_for_timeout(200)  # lets Playwright run the pages' events
        finally:
            ready.set()
            context.close()

    def _count(self, url: str) -> None:
        if "/api/" in url:
            self.requests += 1


def measure(browser: Any, root: Path, args: argparse.Namespace, src: Path | None) -> dict[str, Any]:
    """Interleaved pairs on one server (run from ``src``, else this checkout)."""
    alone: list[dict[str, float]] = []
    watched: list[dict[str, float]] = []
    server = start_server(root / ("base" if src else "data"), fsync="batch", src=src)
    dash = Dashboard(server.admin)
    try:
        with httpx.Client(base_url=server.admin, auth=("guest", "guest"), timeout=60) as http:
            http.put("/api/streams/%2F/bench", json={})
            for i in range(args.streams - 1):
                http.put(f"/api/streams/%2F/listed{i:04d}", json={})
        publish(server.port, server.pid, max(1000, args.n // 4))  # warm-up, not counted
        for i in range(args.pairs):
            for with_browser in (False, True) if i % 2 == 0 else (True, False):
                if not with_browser:
                    alone.append(publish(server.port, server.pid, args.n))
                    continue
                stop, ready = threading.Event(), threading.Event()
                box: list[dict[str, float]] = []

                def run_publisher(
                    stop: threading.Event = stop,
                    ready: threading.Event = ready,
                    box: list[dict[str, float]] = box,
                ) -> None:
                    try:
                        if ready.wait(120):  # the pages are open
                            box.append(publish(server.port, server.pid, args.n))
                    finally:
                        stop.set()

                # Playwright's sync API stays on this thread; the publisher runs beside
                publisher = threading.Thread(target=run_publisher)
                publisher.start()
                dash.watch(browser, stop, ready)
                publisher.join()
                if not box:
                    raise RuntimeError("the dashboard's pages did not open in 120 s")
                watched.append(box[0])
    finally:
        stop_server(server)
    a = [r["rate"] for r in alone]
    w = [r["rate"] for r in watched]
    drops = [100 * (1 - y / x) for x, y in zip(a, w, strict=True)]
    cpu_a = statistics.median(r["server_cpu_us_per_msg"] for r in alone)
    cpu_w = statistics.median(r["server_cpu_us_per_msg"] for r in watched)
    return {
        "publish_100B_unique_confirmed_msg_s": {
            "alone_median": round(statistics.median(a)),
            "dashboard_open_median": round(statistics.median(w)),
            "pair_drop_percent_median": round(statistics.median(drops), 1),
            "pair_drops_percent": [round(x, 1) for x in drops],
            "alone": [round(x) for x in a],
            "dashboard_open": [round(x) for x in w],
        },
        "server_cpu_us_per_msg_median": {
            "alone": round(cpu_a, 2),
            "dashboard_open": round(cpu_w, 2),
            "extra_percent": round(100 * (cpu_w / cpu_a - 1), 1),
        },
        "dashboard_api_requests": dash.requests,
        "dashboard_page_errors": dash.errors[:5],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--n", type=int, default=200_000, help="messages per publish run")
    parser.add_argument("--streams", type=int, default=100, help="streams the pages list")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="also measure a server run from this source folder (an older checkout's src/), "
        "first, in the same run: before/after",
    )
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    launch = chromium_launch()  # checks chromium is there before anything is built or timed
    kit.loadgen()  # built before anything is timed
    root = Path(tempfile.mkdtemp(prefix="sievemq-dash-bench-"))
    result: dict[str, Any] = {"benchmark": "dashboard_cost", "machine": machine()}
    result["load_average_start"] = os.getloadavg()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(**launch)
            if args.baseline_src is not None:
                result["baseline"] = measure(browser, root, args, args.baseline_src)
            result.update(measure(browser, root, args, None))
            browser.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["pairs"] = args.pairs
    result["n"] = args.n
    result["load_average_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
