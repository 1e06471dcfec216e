"""What commit by majority costs a publisher: confirm latency and publish rate, 3 members vs 1.

A real etcd and three real nodes (a, b, c) on this machine. Per round, interleaved: a stream
declared on a with ``x-initial-cluster-size`` 1 (confirmed once on a's disk) and one with 3
(confirmed once a and one replica hold the chunk); with ``--queue-type quorum``, quorum
queues with ``x-quorum-initial-group-size`` 1 and 3 and persistent messages (confirmed once
a and one replica hold the log record). For each:

- confirm latency: one aiormq publisher on a sends one 100 B message, waits for its
  basic.ack, and again, ``--samples`` times (p50, p99, max);
- publish rate: ``--n`` messages with confirms, pipelined in windows of 1000 (the
  ``stream_replication`` bench's publisher).

    python -m bench.commit_latency [--queue-type stream|quorum] [--samples 1000] [--n 20000]
        [--rounds 3] [--out FILE.json]

The client runs on the same cores as the three nodes (a 2-core machine shared with other
work here): the figures are this machine's, to compare with each other, not absolutes.
"""

from __future__ import annotations

import asyncio
import time

import aiormq

from bench._cluster import (
    bench_options,
    declared,
    interleaved,
    publish_confirmed,
    report_rounds,
    running_cluster,
)
from sievemq.testing import ServerProcess


async def _latencies(
    node: ServerProcess, name: str, samples: int, mode: int | None = None
) -> list[float]:
    """Seconds from each publish to its basic.ack, one message in flight at a time."""
    connection = await aiormq.connect(node.url)
    try:
        ch = await connection.channel(publisher_confirms=True)
        body = b"x" * 100
        props = aiormq.spec.Basic.Properties(delivery_mode=mode)
        out: list[float] = []
        for _ in range(samples):
            t0 = time.perf_counter()
            confirm = await ch.basic_publish(body, routing_key=name, properties=props)
            out.append(time.perf_counter() - t0)
            assert isinstance(confirm, aiormq.spec.Basic.Ack), confirm
        return out
    finally:
        await connection.close()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _case(
    nodes: dict[str, ServerProcess], name: str, size: int, samples: int, n: int, kind: str
) -> dict[str, float]:
    a = nodes["a"]
    mode = 2 if kind == "quorum" else None  # a quorum queue logs persistent messages
    declared(a, name, size, kind)
    latencies = asyncio.run(_latencies(a, name, samples, mode))
    t0 = time.perf_counter()
    asyncio.run(publish_confirmed(a, name, n, mode))
    rate = n / (time.perf_counter() - t0)
    return {
        "confirm_p50_ms": _quantile(latencies, 0.50) * 1e3,
        "confirm_p99_ms": _quantile(latencies, 0.99) * 1e3,
        "confirm_max_ms": max(latencies) * 1e3,
        "publish_rate": rate,
    }


def main() -> None:
    parser = bench_options(__doc__, 20_000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--fsync", default="batch", choices=["always", "batch", "never"])
    parser.add_argument("--queue-type", default="stream", choices=["stream", "quorum"])
    opts = parser.parse_args()
    with running_cluster("sievemq-commit-bench-", flags=("--fsync", opts.fsync)) as nodes:
        runs = interleaved(
            opts.rounds,
            {"one_member": 1, "three_members": 3},
            lambda name, size: _case(nodes, name, size, opts.samples, opts.n, opts.queue_type),
        )
    report_rounds(
        "commit_latency",
        opts,
        runs,
        queue_type=opts.queue_type,
        fsync=opts.fsync,
        samples=opts.samples,
    )


if __name__ == "__main__":
    main()
