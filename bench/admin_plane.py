"""What the admin plane costs the AMQP side: `python -m bench.admin_plane` (JSON out).

1. Prometheus scrape cost with 1,000 streams: the median wall time of `/metrics` and
   `/metrics/per-object` (a scrape runs on the gateway's event loop, so this is also the
   longest the AMQP side can wait behind it), and the size of the answer.
2. Publish throughput with and without the dashboard polling (``--streams`` streams
   listed): a pika publisher process (no confirms, 100 B) for a fixed time, alone and then
   while HTTP clients poll: "dashboard" = at the dashboard's own rate (its overview and
   streams pages, each refreshed every 5 s as app.js does); "busy" = all four requests of
   the overview, streams and a stream's page with its message browser once a second;
   "flood" = two clients fetching those back to back. The drop is the admin plane's cost
   to publishers.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pika

from bench._util import machine, proc_cpu_s, start_server, stop_server

STREAMS = 1000
PUBLISH_SECONDS = 8.0
RUNS = 3
POLLERS = 2


def _publisher(port: int, seconds: float, out: Any) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/"))
    ch = conn.channel()
    body = b"x" * 100
    props = pika.BasicProperties(headers={"x-stream-filter-value": "v"})
    n = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            ch.basic_publish("", "bench", body, props)
        n += 200
        conn.process_data_events(0)
    conn.close()
    out.put(n / seconds)


CPU_PER_MSG: list[tuple[str, float]] = []  # (mode, server CPU µs per published message)


def measured(server: Any, mode: str) -> float:
    """``publish_rate`` and the server's CPU per published message in that run (the steadier
    figure on a loaded machine: CPU time does not count the time it waited for a core)."""
    cpu0 = proc_cpu_s(server.pid)
    rate = publish_rate(server.port)
    cpu = proc_cpu_s(server.pid) - cpu0
    CPU_PER_MSG.append((mode, 1e6 * cpu / max(1.0, rate * PUBLISH_SECONDS)))
    return rate


def publish_rate(port: int) -> float:
    q: Any = multiprocessing.Queue()
    p = multiprocessing.Process(target=_publisher, args=(port, PUBLISH_SECONDS, q))
    p.start()
    rate = float(q.get(timeout=120))
    p.join(30)
    return rate


# what the dashboard fetches: its overview and streams pages refresh every 5 s (app.js); a
# stream's page loads once (the stream, its consumers, offsets, advice, newest messages)
OWN_RATE = (("/api/overview", None), ("/api/streams", None))
BUSY = (
    ("/api/overview", None),
    ("/api/streams", None),
    ("/api/streams/%2F/bench", None),
    ("/api/streams/%2F/bench/messages", {"newest": "true", "limit": 20}),
)


def poll(
    base: str,
    stop: threading.Event,
    counter: list[int],
    pause: float,
    paths: tuple[tuple[str, dict[str, Any] | None], ...],
) -> None:
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as http:
        while not stop.is_set():
            for path, params in paths:
                http.get(path, params=params)
            counter[0] += len(paths)
            stop.wait(pause)


def with_pollers(
    server: Any,
    clients: int,
    pause: float,
    paths: tuple[tuple[str, dict[str, Any] | None], ...] = BUSY,
    mode: str = "busy",
) -> tuple[float, float]:
    """Publish rate while ``clients`` fetch ``paths`` (``pause`` s between rounds); also
    the HTTP requests/s they got answered."""
    stop = threading.Event()
    counter = [0]
    threads = [
        threading.Thread(target=poll, args=(server.admin, stop, counter, pause, paths))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    started = time.perf_counter()
    rate = measured(server, mode)
    stop.set()
    for t in threads:
        t.join()
    return rate, counter[0] / (time.perf_counter() - started)


def main() -> None:
    global PUBLISH_SECONDS
    parser = argparse.ArgumentParser(description="admin plane cost (JSON out)")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--seconds", type=float, default=PUBLISH_SECONDS)
    parser.add_argument(
        "--streams", type=int, default=100, help="streams the dashboard lists while publishing"
    )
    parser.add_argument("--no-flood", action="store_true", help="skip the back-to-back pollers")
    parser.add_argument("--no-scrape", action="store_true", help="skip the 1,000-stream part")
    args = parser.parse_args()
    PUBLISH_SECONDS = args.seconds
    root = Path(tempfile.mkdtemp(prefix="sievemq-admin-bench-"))
    result: dict[str, Any] = {"benchmark": "admin_plane", "machine": machine()}
    result["load_average_start"] = os.getloadavg()
    try:
        server = start_server(root / "data", fsync="batch")
        line_admin = server.admin
        with httpx.Client(base_url=line_admin, auth=("guest", "guest"), timeout=60) as http:
            http.put("/api/streams/%2F/bench", json={})
            for i in range(args.streams - 1):
                http.put(f"/api/streams/%2F/listed{i:04d}", json={})
            # --- publish alone, with a dashboard open (its pages once a second), and with
            # two clients polling as fast as they can; interleaved, medians of runs, and the
            # median of each (alone, dashboard) pair's ratio (adjacent runs: load drift cancels)
            alone, dash, flood, dash_rps, flood_rps = [], [], [], [], []
            busy, busy_rps = [], []
            for i in range(args.runs):
                first_alone = i % 2 == 0  # alternate the order inside each pair
                if first_alone:
                    alone.append(measured(server, "alone"))
                rate, rps = with_pollers(server, 1, 5.0, OWN_RATE, "dashboard")
                dash.append(rate)
                dash_rps.append(rps)
                if not first_alone:
                    alone.append(measured(server, "alone"))
                rate, rps = with_pollers(server, 1, 1.0, BUSY, "busy")
                busy.append(rate)
                busy_rps.append(rps)
                if not args.no_flood:
                    rate, rps = with_pollers(server, POLLERS, 0.0, BUSY, "flood")
                    flood.append(rate)
                    flood_rps.append(rps)
            base = statistics.median(alone)
            pair_drops = [100 * (1 - d / a) for a, d in zip(alone, dash, strict=True)]
            out: dict[str, Any] = {
                "alone_median": round(base),
                "dashboard_polling_median": round(statistics.median(dash)),
                "dashboard_drop_percent": round(100 * (1 - statistics.median(dash) / base), 1),
                "dashboard_pair_drop_percent_median": round(statistics.median(pair_drops), 1),
                "dashboard_http_requests_per_s": round(statistics.median(dash_rps), 1),
                "runs": args.runs,
                "alone": [round(x) for x in alone],
                "dashboard": [round(x) for x in dash],
                "pair_drops_percent": [round(x, 1) for x in pair_drops],
                "busy_polling_median": round(statistics.median(busy)),
                "busy_drop_percent": round(100 * (1 - statistics.median(busy) / base), 1),
                "busy_http_requests_per_s": round(statistics.median(busy_rps), 1),
                "busy": [round(x) for x in busy],
            }
            if flood:
                out["flood_polling_median"] = round(statistics.median(flood))
                out["flood_drop_percent"] = round(100 * (1 - statistics.median(flood) / base), 1)
                out["flood_http_requests_per_s"] = round(statistics.median(flood_rps), 1)
                out["flood"] = [round(x) for x in flood]
            result["publish_100B_no_confirm_msg_s"] = out
            cpu = {
                mode: round(statistics.median(v for m, v in CPU_PER_MSG if m == mode), 2)
                for mode in dict(CPU_PER_MSG)
            }
            result["server_cpu_us_per_published_message_median"] = cpu
            result["server_cpu_extra_percent"] = {
                mode: round(100 * (cpu[mode] / cpu["alone"] - 1), 1) for mode in cpu
            }
            # --- scrape cost with 1,000 streams
            if not args.no_scrape:
                for i in range(STREAMS - args.streams):
                    http.put(f"/api/streams/%2F/s{i:04d}", json={})
                for path in ("/metrics", "/metrics/per-object", "/api/queues", "/api/streams"):
                    times = []
                    size = 0
                    for _ in range(5):
                        t0 = time.perf_counter()
                        r = http.get(path)
                        times.append(time.perf_counter() - t0)
                        size = len(r.content)
                    result[f"GET {path} with {STREAMS} streams"] = {
                        "median_ms": round(1000 * statistics.median(times), 1),
                        "max_ms": round(1000 * max(times), 1),
                        "bytes": size,
                    }
        stop_server(server)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["load_average_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
