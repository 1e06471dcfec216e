"""A replicated quorum queue's pipelined publish rate beside a replicated stream's, per node.

    python -m bench.quorum_pipeline [--n 30000] [--rounds 3] [--baseline REV]
                                    [--cases stream-3,quorum-3,quorum-1] [--fsync batch]

Three nodes and an etcd on this machine (``--fsync batch`` unless ``--fsync``); each round
publishes ``--n`` messages (100 B, unique properties, window 1,000: the Go loadgen, as
``bench.replication_vs_rabbitmq`` does; persistent to quorum queues) through the leader to,
in turn, a stream of three members, a quorum queue of three members and a quorum queue of
one (the same queue's path without replication), each on a queue of its own. Per case: the
rate, the confirm latency, the server CPU per message on the leader (and its kernel part)
and on the busier replica (where the time goes). After each replicated quorum round the
bench checks that a replica's copy holds every message.

``--baseline REV`` runs a second cluster on ``git archive REV src`` beside this tree's, the
two taking each case in turn (their order swapped every round), so a change is measured
against its baseline under the same load: medians per tree and the per-round ratios.
``SIEVEMQ_BENCH_PROFILE=DIR`` records each node with py-spy (``PY_SPY``: its path) while a
quorum case publishes, one raw flame file per node per round.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench._cluster import bench_options, declared, live_ids, started_nodes, wait_for
from bench._util import REPO, export_src, proc_cpu_s, report
from bench.replication_vs_rabbitmq import loadgen
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import running_etcd

CASES = {"stream-3": ("stream", 3), "quorum-3": ("quorum", 3), "quorum-1": ("quorum", 1)}
NAMES = ("a", "b", "c")
Nodes = dict[str, ServerProcess]


@contextmanager
def cluster(base: Path, src: Path, fsync: str) -> Iterator[Nodes]:
    """An etcd and three nodes running the package in ``src`` (data under ``base``)."""
    env = {"PYTHONPATH": str(src)}
    with (
        running_etcd(base / "etcd") as etcd,
        started_nodes(base, etcd.url, NAMES, ("--fsync", fsync), env) as nodes,
    ):
        yield nodes


def _profilers(nodes: Nodes, tag: str) -> list[subprocess.Popen[bytes]]:
    """py-spy on every node while a case runs (``SIEVEMQ_BENCH_PROFILE``), else none."""
    out = os.environ.get("SIEVEMQ_BENCH_PROFILE")
    if not out:
        return []
    spy = os.environ.get("PY_SPY", "py-spy")
    Path(out).mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            [
                spy,
                "record",
                "-p",
                str(proc.pid),
                "-r",
                "200",
                "-f",
                "raw",
                "--nonblocking",
                "-o",
                f"{out}/{tag}-{name}.txt",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, proc in nodes.items()
    ]


def _stop(profilers: list[subprocess.Popen[bytes]]) -> None:
    for spy in profilers:
        spy.send_signal(2)  # SIGINT: py-spy writes its file
    for spy in profilers:
        spy.wait(timeout=60)


def _sys_s(pid: int) -> float:
    """System (kernel) CPU seconds of a process (sends and writes, on loopback also the
    receiver's TCP processing)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[12]) / os.sysconf("SC_CLK_TCK")


def one_case(nodes: Nodes, queue: str, kind: str, size: int, n: int) -> dict[str, float]:
    """Declare ``queue`` on node a (its leader), publish ``n`` pipelined, delete it."""
    leader = nodes["a"]
    declared(leader, queue, size, kind)
    before = {name: proc_cpu_s(p.pid) for name, p in nodes.items()}
    sys_before = _sys_s(leader.pid)
    profilers = _profilers(nodes, queue) if kind == "quorum" else []
    t0 = time.perf_counter()
    got = loadgen(leader.amqp_port, queue, n, 1000, 16, kind)
    wall = time.perf_counter() - t0
    cpu = {name: proc_cpu_s(p.pid) - before[name] for name, p in nodes.items()}
    leader_sys = _sys_s(leader.pid) - sys_before
    _stop(profilers)
    if kind == "quorum" and size > 1:  # (after the timing) the replica truly holds them
        wait_for(lambda: len(live_ids(nodes["b"], queue) or ()) == n, "a replica holds all")
    httpx.delete(
        f"{leader.admin_url}/api/queues/%2F/{queue}", auth=("guest", "guest"), timeout=30
    ).raise_for_status()
    return {
        "msgs_per_s": round(n / float(got.get("wall_secs") or wall)),
        "confirm_p50_ms": round(float(got["confirm_p50_us"]) / 1e3, 3),
        "confirm_p99_ms": round(float(got["confirm_p99_us"]) / 1e3, 3),
        "leader_cpu_us_per_msg": round(cpu["a"] / n * 1e6, 2),
        "leader_sys_us_per_msg": round(leader_sys / n * 1e6, 2),
        "replica_cpu_us_per_msg": round(max(cpu["b"], cpu["c"]) / n * 1e6, 2),
        "all_cpu_us_per_msg": round(sum(cpu.values()) / n * 1e6, 2),
        "leader_cores_used": round(cpu["a"] / wall, 2),
    }


def summary(runs: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, Any]:
    """Medians per tree and case, and (with a baseline) the per-round ratios' medians."""
    out: dict[str, Any] = {
        tree: {
            case: {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
            for case, rounds in cases.items()
        }
        for tree, cases in runs.items()
    }
    if "base" in runs:
        out["head_over_base"] = {
            case: {
                k: round(statistics.median(h[k] / b[k] for h, b in pairs if b[k]), 3)
                for k in ("msgs_per_s", "leader_cpu_us_per_msg", "replica_cpu_us_per_msg")
            }
            for case, hs in runs["head"].items()
            for pairs in (list(zip(hs, runs["base"][case], strict=True)),)
        }
    return out


def main() -> None:
    parser = bench_options(__doc__, 30_000)
    parser.add_argument("--fsync", default="batch")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--baseline", help="a git revision to run beside this tree")
    opts = parser.parse_args()
    cases = {c: CASES[c] for c in opts.cases.split(",")}
    with tempfile.TemporaryDirectory(prefix="sievemq-qpipe-") as tmp, ExitStack() as stack:
        srcs = {"head": REPO / "src"}
        if opts.baseline:
            srcs["base"] = export_src(opts.baseline, Path(tmp) / "base-src")
        clusters = {
            tree: stack.enter_context(cluster(Path(tmp) / tree, src, opts.fsync))
            for tree, src in srcs.items()
        }
        runs = {tree: {case: [] for case in cases} for tree in clusters}
        trees = list(clusters)
        for r in range(opts.rounds):
            for case, (kind, size) in cases.items():
                for tree in trees if r % 2 == 0 else trees[::-1]:
                    got = one_case(clusters[tree], f"{case}-{r}", kind, size, opts.n)
                    runs[tree][case].append(got)
    report(
        "quorum_pipeline",
        opts.out,
        baseline=opts.baseline,
        fsync=opts.fsync,
        n=opts.n,
        rounds=opts.rounds,
        medians=summary(runs),
        runs=runs,
    )


if __name__ == "__main__":
    main()
