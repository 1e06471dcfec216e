"""How long an admin request holds the gateway's event loop: `python -m bench.admin_loop_stall`.

The gateway runs in this process (``sievemq.testing.running_gateway``, wired as ``sievemq
serve`` is: uvicorn on the same loop as AMQP) with ``--streams`` streams (1,000 by default).
A ticker task on that loop sleeps 1 ms at a time and records how late each wake-up is: the
longest lateness while a request is served is the longest any AMQP connection could have
waited behind it. The HTTP client runs in another process (not a thread: the GIL).
For each path: the median wall time of the request and the worst loop stall during it
(median over ``--runs``); then the same for a policy PUT and DELETE that match every stream
(each put to work on all of them). JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from typing import Any

import httpx

from bench._util import machine
from sievemq.testing import RunningGateway, running_gateway

PATHS = (
    "/api/whoami",
    "/metrics",
    "/metrics/per-object",
    "/api/queues",
    "/api/queues?page=1&page_size=100",
    "/api/streams",
    "/api/overview",
)

# applied to every stream, then taken away again, in each run
_POLICY = {"pattern": "^s", "definition": {"max-length-bytes": 10**9, "max-age": "7D"}}
CHANGES = (
    ("PUT", "/api/policies/%2F/bench", _POLICY),
    ("DELETE", "/api/policies/%2F/bench", None),
)


class Ticker:
    """Wakes every ``period`` s on the loop and records each wake-up's lateness: those above
    ``above`` s, or every one with ``above=None``."""

    def __init__(self, period: float = 0.001, above: float | None = 0.0005) -> None:
        self.period = period
        self.above = above
        self.late: list[tuple[float, float]] = []  # (when woken, lateness)
        self.stop = False

    async def run(self) -> None:
        while not self.stop:
            t0 = time.perf_counter()
            await asyncio.sleep(self.period)
            t1 = time.perf_counter()
            late = t1 - t0 - self.period
            if self.above is None or late > self.above:
                self.late.append((t1, late))

    def worst(self, start: float, end: float) -> float:
        """The worst lateness of a wake-up due inside [start, end] (woken up to its lateness
        after it)."""
        return max((late for t, late in self.late if start <= t - late <= end), default=0.0)


def declare_streams(gw: RunningGateway, n: int) -> None:
    """``n`` durable streams ``s0000``, ``s0001``… in vhost ``/``, declared on the broker
    directly (no client round trips)."""
    v = gw.broker.vhost("/")
    for i in range(n):
        v.declare_queue(
            f"s{i:04d}",
            durable=True,
            exclusive=False,
            auto_delete=False,
            arguments={"x-queue-type": "stream"},
        )


def _client(base: str, runs: int, out: Any) -> None:
    """In a process of its own (a thread would take the GIL from the loop it measures):
    each request's [start, end] on the system-wide monotonic clock."""
    windows: dict[str, list[tuple[float, float, int]]] = {}
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=120) as http:
        for path in PATHS:
            for _ in range(runs):
                time.sleep(0.05)
                t0 = time.perf_counter()
                r = http.get(path)
                t1 = time.perf_counter()
                r.raise_for_status()
                windows.setdefault(path, []).append((t0, t1, len(r.content)))
        for _ in range(runs):  # a policy set on, then removed from, every stream
            for method, path, body in CHANGES:
                time.sleep(0.05)
                t0 = time.perf_counter()
                r = http.request(method, path, json=body)
                t1 = time.perf_counter()
                r.raise_for_status()
                windows.setdefault(f"{method} {path}", []).append((t0, t1, len(r.content)))
        t0 = time.perf_counter()
        time.sleep(0.3 * runs)
        windows["idle"] = [(t0, time.perf_counter(), 0)]
    out.put(windows)


async def amain(streams: int, runs: int) -> dict[str, Any]:
    result: dict[str, Any] = {"benchmark": "admin_loop_stall", "streams": streams, "runs": runs}
    result["machine"] = machine()
    async with running_gateway() as gw:
        declare_streams(gw, streams)
        ticker = Ticker()
        task = asyncio.ensure_future(ticker.run())
        ctx = multiprocessing.get_context("spawn")
        q: Any = ctx.Queue()
        proc = ctx.Process(target=_client, args=(gw.admin_url, runs, q))
        proc.start()
        windows = await asyncio.to_thread(q.get, True, 600)
        await asyncio.to_thread(proc.join, 30)
        ticker.stop = True
        await task
        out: dict[str, Any] = {}
        for path, spans in windows.items():
            stalls = [ticker.worst(t0, t1) for t0, t1, _ in spans]
            walls = [t1 - t0 for t0, t1, _ in spans]
            out[path] = {
                "loop_worst_stall_median_ms": round(1000 * statistics.median(stalls), 1),
                "loop_worst_stall_max_ms": round(1000 * max(stalls), 1),
            }
            if path != "idle":
                out[path]["median_ms"] = round(1000 * statistics.median(walls), 1)
                out[path]["bytes"] = spans[-1][2]
        result["requests"] = out
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(amain(args.streams, args.runs)), indent=1))


if __name__ == "__main__":
    main()
