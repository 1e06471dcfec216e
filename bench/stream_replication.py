"""What stream replication costs the leader, and how fast a returning replica catches up.

A real etcd and three real nodes (a, b, c) on this machine. Per round, interleaved: a stream
declared on a with ``x-initial-cluster-size`` 1 (no replica) and one with 3 (replicas on b
and c); N messages of 100 B with one of 50 filter values published to a with confirms
(aiormq, pipelined in windows of 1000). Reported per case: the leader's publish rate (the
last confirm), the leader's CPU per message over the publish, and the CPU of all three
nodes per message until every replica's files equal the leader's. Then the catch-up: c is
SIGKILLed, N x 10 messages go to a replicated stream, c restarts, and the time from its
ready line to its copy equal to the leader's gives the catch-up rate (its follower starts at
the join, just before the ready line: the time from the restart is reported too).

    python -m bench.stream_replication [--n 50000] [--rounds 3] [--out FILE.json]

The load generator runs on the same cores as the nodes (this is a 2-core machine): the
rates are the machine's, the CPU per message is the servers' own (utime + stime, /proc).
"""

from __future__ import annotations

import asyncio
import time

from bench._cluster import (
    bench_options,
    caught_up,
    declared,
    interleaved,
    publish_confirmed,
    report_rounds,
    running_cluster,
    segment_sizes,
    wait_for,
)
from bench._util import proc_cpu_s
from sievemq.storage.layout import stream_directory
from sievemq.testing import ServerProcess


def _case(nodes: dict[str, ServerProcess], name: str, size: int, n: int) -> dict[str, float]:
    a = nodes["a"]
    declared(a, name, size)
    cpu0 = {k: proc_cpu_s(p.pid) for k, p in nodes.items()}
    t0 = time.perf_counter()
    asyncio.run(publish_confirmed(a, name, n))
    publish_s = time.perf_counter() - t0
    leader_cpu = proc_cpu_s(a.pid) - cpu0["a"]
    if size > 1:
        wait_for(lambda: all(caught_up(a, nodes[r], name) for r in ("b", "c")))
    replicated_s = time.perf_counter() - t0
    total_cpu = sum(proc_cpu_s(p.pid) - cpu0[k] for k, p in nodes.items())
    return {
        "publish_rate": n / publish_s,
        "leader_cpu_us_per_msg": leader_cpu / n * 1e6,
        "all_nodes_cpu_us_per_msg": total_cpu / n * 1e6,
        "replicated_after_s": replicated_s,
    }


def _catch_up(nodes: dict[str, ServerProcess], n: int) -> dict[str, float]:
    a, c = nodes["a"], nodes["c"]
    declared(a, "catch-up", 3)
    c.kill()
    asyncio.run(publish_confirmed(a, "catch-up", n))
    started = time.perf_counter()
    c.restart()  # (its follower starts at the join, just before the ready line)
    ready = time.perf_counter()
    wait_for(lambda: caught_up(a, c, "catch-up"))
    done = time.perf_counter()
    size = sum(segment_sizes(stream_directory(a.data_dir, "/", "catch-up")).values())
    return catch_up_figures(n, size, started, ready, done)


def catch_up_figures(
    n: int, size: int, started: float, ready: float, done: float
) -> dict[str, float]:
    """A catch-up of ``n`` messages (``size`` bytes): started, ready line, caught up."""
    return {
        "messages": n,
        "bytes": size,
        "seconds_from_start": done - started,
        "seconds_from_ready": done - ready,
        "start_to_ready_s": ready - started,
        "msg_per_s_from_ready": n / (done - ready),
        "mb_per_s_from_ready": size / (done - ready) / 1e6,
        "msg_per_s_from_start": n / (done - started),
    }


def main() -> None:
    parser = bench_options(__doc__, 50_000)
    parser.add_argument("--catch-up-factor", type=int, default=10, help="x N messages")
    opts = parser.parse_args()
    with running_cluster("sievemq-repl-bench-") as nodes:
        runs = interleaved(
            opts.rounds,
            {"no_replica": 1, "two_replicas": 3},
            lambda name, size: _case(nodes, name, size, opts.n),
        )
        catch_up = _catch_up(nodes, opts.n * opts.catch_up_factor)
    report_rounds("stream_replication", opts, runs, catch_up=catch_up)


if __name__ == "__main__":
    main()
