"""A returning replica's catch-up rate, and what its catch-up costs the leader's publishers.

A real etcd and three real nodes (a, b, c) on this machine. Per round: a stream declared on
a with three members; replica c stopped (SIGTERM); N messages of 100 B (50 filter values)
published to a with confirms (the majority is a and b); then a steady publisher starts on
the same stream (aiormq, confirms, windows of ``--window`` messages, each confirm's latency
kept) and c is started again. Measured:

- **catch-up**: from c's ready line until its copy holds every byte the leader held when c
  was started (the segment files' sizes, read from disk), the backlog's messages and bytes
  per second (its follower starts at the join, just before the ready line: the time from
  the start is reported too);
- **the publisher's stall while c catches up**: its longest time without a confirm and its
  confirm latency p50/p99 over that time, against **no catch-up**: the same publisher for as
  long right after, with every replica following;
- each node's CPU (cores busy, utime + stime from /proc) over both windows: what the
  catch-up takes from the leader (its shipping) and what the replica spends appending.

    python -m bench.replica_catch_up [--n 200000] [--rounds 3] [--out FILE.json]

The load generator runs on the same cores as the nodes (a 2-core machine here): the figures
are this machine's; medians of the rounds are reported with each round's figures.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiormq

from bench._cluster import (
    bench_options,
    declared,
    publish_confirmed,
    report_rounds,
    running_cluster,
    segment_sizes,
    wait_for,
)
from bench._util import proc_cpu_s
from bench.stream_replication import catch_up_figures
from sievemq.cluster.replication import replica_directory
from sievemq.storage.layout import stream_directory
from sievemq.testing import ServerProcess


@dataclass
class Steady:
    """A confirmed publisher in a thread of its own: windows of ``window`` messages, each
    message's confirm latency and the time of each confirm kept."""

    node: ServerProcess
    stream: str
    window: int
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (acked at, seconds)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Steady:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    async def _run(self) -> None:
        connection = await aiormq.connect(self.node.url)
        try:
            ch = await connection.channel(publisher_confirms=True)

            async def one(body: bytes) -> None:
                sent = time.monotonic()
                await ch.basic_publish(body, routing_key=self.stream)
                acked = time.monotonic()
                self.latencies.append((acked, acked - sent))

            n = 0
            while not self._stop.is_set():
                await asyncio.gather(*(one(b"s%09d" % (n + i)) for i in range(self.window)))
                n += self.window
        finally:
            await connection.close()

    def figures(self, start: float, end: float) -> dict[str, float]:
        """Confirms in [start, end]: the longest time without one, latency p50 and p99."""
        inside = [(t, lat) for t, lat in self.latencies if start <= t <= end]
        times = [start, *(t for t, _ in inside), end]
        lats = sorted(lat for _, lat in inside)
        return {
            "confirms": len(inside),
            "confirms_per_s": len(inside) / (end - start),
            "worst_stall_s": max(b - a for a, b in itertools.pairwise(times)),
            "p50_ms": lats[len(lats) // 2] * 1e3 if lats else float("nan"),
            "p99_ms": lats[min(len(lats) - 1, int(len(lats) * 0.99))] * 1e3
            if lats
            else float("nan"),
            "max_ms": lats[-1] * 1e3 if lats else float("nan"),
        }


def _bytes(directory: Path) -> int:
    return sum(segment_sizes(directory).values())


def _round(nodes: dict[str, ServerProcess], name: str, n: int, window: int) -> dict[str, Any]:
    a, c = nodes["a"], nodes["c"]
    declared(a, name, 3)
    assert c.stop() == 0, c.stderr()
    copy = replica_directory(c.data_dir, "/", name)
    before = _bytes(copy)
    asyncio.run(publish_confirmed(a, name, n))
    steady = Steady(a, name, window).start()
    time.sleep(1.0)  # its first windows: connected and confirming
    target = _bytes(stream_directory(a.data_dir, "/", name))
    started = time.monotonic()
    c.start()
    ready = time.monotonic()
    cpu = {k: proc_cpu_s(p.pid) for k, p in nodes.items()}
    wait_for(lambda: _bytes(copy) >= target)
    done = time.monotonic()
    cpu_during = {k: (proc_cpu_s(p.pid) - cpu[k]) / (done - ready) for k, p in nodes.items()}
    time.sleep(0.5)  # the copy follows the steady publisher from here
    baseline_start = time.monotonic()
    cpu = {k: proc_cpu_s(p.pid) for k, p in nodes.items()}
    time.sleep(max(done - started, 2.0))
    baseline_end = time.monotonic()
    cpu_after = {
        k: (proc_cpu_s(p.pid) - cpu[k]) / (baseline_end - baseline_start) for k, p in nodes.items()
    }
    steady.stop()
    return {
        **catch_up_figures(n, target - before, started, ready, done),
        "publisher_during_catch_up": steady.figures(started, done),
        "publisher_during_catch_up_from_ready": steady.figures(ready, done),
        "publisher_no_catch_up": steady.figures(baseline_start, baseline_end),
        # each node's CPU (cores busy) from c's ready line to caught up, and without
        "cpu_during_catch_up": cpu_during,
        "cpu_no_catch_up": cpu_after,
    }


def main() -> None:
    parser = bench_options(__doc__, 200_000, "messages c misses")
    parser.add_argument("--window", type=int, default=20, help="the steady publisher's")
    opts = parser.parse_args()
    runs = []
    with running_cluster("sievemq-catch-up-bench-") as nodes:
        for r in range(opts.rounds):
            runs.append(_round(nodes, f"catch-up-{r}", opts.n, opts.window))
            print(json.dumps(runs[-1]), flush=True)
    report_rounds("replica_catch_up", opts, runs, window=opts.window)


if __name__ == "__main__":
    main()
