"""What the admin plane costs the AMQP side: `python -m bench.admin_plane` (JSON out).

1. Prometheus scrape cost with 1,000 streams: the median wall time of `/metrics` and
   `/metrics/per-object` (a scrape runs on the gateway's event loop, so this is also the
   longest the AMQP side can wait behind it), and the size of the answer.
2. Publish throughput with and without the dashboard polling: a pika publisher process
   (no confirms, 100 B) for a fixed time, alone and then while HTTP clients poll what the
   dashboard polls (overview, streams list, a stream page with its message browser) as fast
   as they can. The drop is the admin plane's cost to publishers.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pika

from bench._util import machine, start_server, stop_server

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


def publish_rate(port: int) -> float:
    q: Any = multiprocessing.Queue()
    p = multiprocessing.Process(target=_publisher, args=(port, PUBLISH_SECONDS, q))
    p.start()
    rate = float(q.get(timeout=120))
    p.join(30)
    return rate


def poll(base: str, stop: threading.Event, counter: list[int], pause: float) -> None:
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as http:
        while not stop.is_set():
            http.get("/api/overview")
            http.get("/api/streams")
            http.get("/api/streams/%2F/bench")
            http.get("/api/streams/%2F/bench/messages", params={"newest": "true", "limit": 20})
            counter[0] += 4
            stop.wait(pause)


def with_pollers(server: Any, clients: int, pause: float) -> tuple[float, float]:
    """Publish rate while ``clients`` poll the dashboard's pages (``pause`` s between
    rounds); also the HTTP requests/s they got answered."""
    stop = threading.Event()
    counter = [0]
    threads = [
        threading.Thread(target=poll, args=(server.admin, stop, counter, pause))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    started = time.perf_counter()
    rate = publish_rate(server.port)
    stop.set()
    for t in threads:
        t.join()
    return rate, counter[0] / (time.perf_counter() - started)


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="sievemq-admin-bench-"))
    result: dict[str, Any] = {"benchmark": "admin_plane", "machine": machine()}
    try:
        server = start_server(root / "data", fsync="batch")
        line_admin = server.admin
        with httpx.Client(base_url=line_admin, auth=("guest", "guest"), timeout=60) as http:
            http.put("/api/streams/%2F/bench", json={})
            # --- publish alone, with a dashboard open (its pages once a second), and with
            # two clients polling as fast as they can; interleaved, medians of RUNS
            alone, dash, flood, dash_rps, flood_rps = [], [], [], [], []
            for _ in range(RUNS):
                alone.append(publish_rate(server.port))
                rate, rps = with_pollers(server, 1, 1.0)
                dash.append(rate)
                dash_rps.append(rps)
                rate, rps = with_pollers(server, POLLERS, 0.0)
                flood.append(rate)
                flood_rps.append(rps)
            base = statistics.median(alone)
            result["publish_100B_no_confirm_msg_s"] = {
                "alone_median": round(base),
                "dashboard_polling_median": round(statistics.median(dash)),
                "dashboard_drop_percent": round(100 * (1 - statistics.median(dash) / base), 1),
                "dashboard_http_requests_per_s": round(statistics.median(dash_rps), 1),
                "flood_polling_median": round(statistics.median(flood)),
                "flood_drop_percent": round(100 * (1 - statistics.median(flood) / base), 1),
                "flood_http_requests_per_s": round(statistics.median(flood_rps), 1),
                "runs": RUNS,
                "alone": [round(x) for x in alone],
                "dashboard": [round(x) for x in dash],
                "flood": [round(x) for x in flood],
            }
            # --- scrape cost with 1,000 streams
            for i in range(STREAMS - 1):
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
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
