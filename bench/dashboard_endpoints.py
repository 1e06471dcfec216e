"""The server CPU of each request the dashboard's pages make:
`python -m bench.dashboard_endpoints [--n 60000] [--streams 100] [--calls 20]` (JSON out,
about a minute).

`sievemq serve` (``--fsync batch``) with ``--streams`` streams; the Go load generator
publishes ``--n`` messages into ``bench`` (as in ``bench.dashboard_cost``); then each
request the overview, the streams list and the stream page of ``bench`` make is sent
``--calls`` times, one after another, spaced like the pages' 5 s polling is not (they are
back to back: a cache kept for the poll interval answers all but the first), and the
server's CPU per call is reported (median of three rounds). Run before and after a change
(``--src``: an older checkout's ``src/``) to see which endpoint the dashboard's cost comes
from.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench import kit
from bench._util import machine, proc_cpu_s, start_server, stop_server
from bench.dashboard_cost import publish

BASE = "/api/streams/%2F/bench"
ENDPOINTS = {
    "whoami (baseline: HTTP and auth only)": "/api/whoami",
    "overview": "/api/overview",
    "streams": "/api/streams",
    "stream": BASE,
    "consumers": BASE + "/consumers",
    "offsets": BASE + "/offsets",
    "filter_advice": BASE + "/filter-advice?target_fpr=0.01",
    "messages_newest": BASE + "/messages?limit=20&newest=true",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=60_000, help="messages in the stream")
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--calls", type=int, default=20, help="calls per endpoint per round")
    parser.add_argument(
        "--src", type=Path, help="run the server from this source folder (a baseline's src/)"
    )
    args = parser.parse_args()
    kit.loadgen()
    root = Path(tempfile.mkdtemp(prefix="sievemq-dash-endpoints-"))
    result: dict[str, Any] = {"benchmark": "dashboard_endpoints", "machine": machine()}
    result["load_average_start"] = os.getloadavg()
    server = start_server(root / "data", fsync="batch", src=args.src)
    rounds: dict[str, list[float]] = {name: [] for name in ENDPOINTS}
    try:
        with httpx.Client(base_url=server.admin, auth=("guest", "guest"), timeout=60) as http:
            http.put(BASE, json={})
            for i in range(args.streams - 1):
                http.put(f"/api/streams/%2F/listed{i:04d}", json={})
            publish(server.port, server.pid, args.n)
            for _ in range(3):
                for name, path in ENDPOINTS.items():
                    cpu0 = proc_cpu_s(server.pid)
                    for _ in range(args.calls):
                        assert http.get(path).status_code == 200, path
                    cpu = proc_cpu_s(server.pid) - cpu0
                    rounds[name].append(1e3 * cpu / args.calls)
    finally:
        stop_server(server)
        shutil.rmtree(root, ignore_errors=True)
    result["server_cpu_ms_per_call_median"] = {
        name: round(statistics.median(v), 2) for name, v in rounds.items()
    }
    result["n"], result["streams"], result["calls"] = args.n, args.streams, args.calls
    result["load_average_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
