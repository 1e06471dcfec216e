"""Replicated queues on three SieveMQ nodes beside a three-node RabbitMQ 3.10.8 cluster.

    python -m bench.replication_vs_rabbitmq [--rounds 3] [--samples 2000] [--n 50000]
        [--failover-rounds 3] [--kinds stream,quorum] [--out FILE.json]

Both clusters run at once on this machine, on 127.0.0.1, their state under /tmp: an etcd
and three SieveMQ nodes (``--cluster-lease-ttl`` 5 s, the default, or ``--lease-ttl``;
``--fsync batch``, the default, or ``--sievemq-fsync always``), and three RabbitMQ nodes
with their own names, AMQP and distribution ports, one private epmd and a shared cookie,
joined with ``rabbitmqctl join_cluster``
(``bench/rabbitmq_cluster.py``; default settings). Everything is stopped at the end, after
an error too.

Per round the systems take turns (so the machine's noise hits both alike), for a stream
(``x-queue-type=stream``, ``x-initial-cluster-size`` 3) and a quorum queue
(``x-quorum-initial-group-size`` 3), each declared through the first node (its leader) and
published to there with the Go load generator (``bench/loadgen``, amqp091-go, 100 B,
``-unique-props``; ``-persistent`` for the quorum queues: SieveMQ logs and replicates only
persistent messages, as a RabbitMQ quorum queue stores every message):

- ``one_at_a_time``: ``--samples`` messages, one in flight (``-window 1``), every confirm
  timed: confirm latency p50/p99;
- ``pipelined``: ``--n`` messages with at most 1000 unconfirmed (``-window 1000``): the
  publish rate with confirms and its confirm latency p50/p99 (one message in 16 timed);

and for each, the server CPU per message of the three nodes together (utime + stime,
/proc; SieveMQ's etcd apart, ``etcd_cpu_us_per_msg``).

Then the failover rounds (the nodes take turns at being the victim): a queue declared on the
victim (its leader), 2000 confirmed messages, the victim SIGKILLed (RabbitMQ: the leader
node's beam), and an aiormq client on the next node publishing a message every 50 ms with
confirms until the first basic.ack (a dropped channel or connection is opened again, and
so is a channel after a nack): ``failover_s`` is from the SIGKILL to that ack. A second
client beside it keeps its channel after nacks: ``same_channel_failover_s`` (None: no ack
within ``--same-channel-timeout``). The victim is restarted on its data and its copy caught
up before the next round (a SieveMQ stream's segment files, a quorum queue's live log ids,
equal to the new leader's; RabbitMQ: its member online again).

Both systems' quorum queues have three members that commit by majority (SieveMQ:
``cluster/quorum_replication.py``; under ``--fsync batch`` every node fdatasyncs within
200 ms, under ``always`` the leader and each replica before they count a message held;
RabbitMQ: Raft, its log fsynced before a confirm).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiormq
import pika

from bench import kit, rabbitmq_cluster
from bench._cluster import (
    caught_up,
    live_ids,
    members_online,
    quorum_caught_up,
    started_nodes,
    wait_for,
)
from bench._util import git_commit, machine, proc_cpu_s
from bench.cluster_failover import _leader as sievemq_leader
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess, running_etcd

NAMES = ("a", "b", "c")
WINDOW = 1000
BEFORE_KILL = 2000
PACE_S = 0.05  # the failover clients publish a message every 50 ms
# what a dropped channel or connection raises in aiormq
DROPPED = (aiormq.exceptions.AMQPError, aiormq.exceptions.ChannelInvalidStateError, OSError)
ARGUMENTS = {
    "stream": {"x-queue-type": "stream", "x-initial-cluster-size": 3},
    "quorum": {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3},
}


# (slower polls than the other benches': the members' /api/queues during a measured round)
_wait = functools.partial(wait_for, timeout=180.0, every=0.05)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------- the two clusters


@dataclass
class SieveSide:
    """Three SieveMQ nodes and their etcd."""

    nodes: list[ServerProcess]
    etcd: EtcdProcess
    name: str = "sievemq"

    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def ports(self) -> list[int]:
        return [n.amqp_port for n in self.nodes]

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(n.pid) for n in self.nodes if n.running)

    def extra_cpu_s(self) -> float:
        assert self.etcd.proc is not None
        return proc_cpu_s(self.etcd.proc.pid)

    def settled(self, queue: str, kind: str) -> bool:
        """Every member of the stream or quorum queue is online."""
        return members_online(self.nodes[0], queue, 3)

    def leader(self, queue: str, via: int) -> str:
        return str(sievemq_leader(self.nodes[via], queue))

    def kill(self, index: int) -> None:
        self.nodes[index].kill()

    def restart(self, index: int, queue: str, kind: str, via: int) -> None:
        """Start the victim again and wait until its copy equals the new leader's."""
        victim = self.nodes[index]
        victim.start()
        leader = {n.data_dir.name: n for n in self.nodes}[
            str(sievemq_leader(self.nodes[via], queue))
        ]
        same = caught_up if kind == "stream" else quorum_caught_up
        _wait(lambda: same(leader, victim, queue), "the old leader's copy catches up")


@dataclass
class RabbitSide:
    """Three RabbitMQ nodes joined into one cluster."""

    cluster: rabbitmq_cluster.RabbitCluster
    name: str = "rabbitmq"

    def urls(self) -> list[str]:
        return [n.url for n in self.cluster.nodes]

    def ports(self) -> list[int]:
        return [n.amqp_port for n in self.cluster.nodes]

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(pid) for pid in self.cluster.pids())

    def extra_cpu_s(self) -> float:
        return 0.0

    def online(self, queue: str) -> int:
        """How many of the queue's members are online, as ``rabbitmqctl list_queues`` says."""
        node = next(n for n in self.cluster.nodes if n.running)
        for line in node.ctl("list_queues", "name", "online").splitlines():
            name, _, online = line.partition("\t")
            if name == queue:
                return len([m for m in online.strip("[] ").split(",") if m.strip()])
        return 0

    def settled(self, queue: str, kind: str) -> bool:
        return self.online(queue) == 3

    def leader(self, queue: str, via: int) -> str:
        return self.cluster.leader(queue)

    def kill(self, index: int) -> None:
        self.cluster.nodes[index].kill()

    def restart(self, index: int, queue: str, kind: str, via: int) -> None:
        self.cluster.nodes[index].start()
        _wait(lambda: self.online(queue) == 3, "the restarted node's member online")


Side = SieveSide | RabbitSide


@contextmanager
def sievemq_cluster(base: Path, lease_ttl: int, fsync: str = "batch") -> Iterator[SieveSide]:
    flags = ("--cluster-lease-ttl", str(lease_ttl), "--fsync", fsync)
    with (
        running_etcd(base / "etcd") as etcd,
        started_nodes(base, etcd.url, NAMES, flags) as nodes,
    ):
        yield SieveSide(list(nodes.values()), etcd)


@contextmanager
def rabbit_cluster() -> Iterator[RabbitSide]:
    with rabbitmq_cluster.rabbitmq_cluster(3) as cluster:
        yield RabbitSide(cluster)


def declare(url: str, queue: str, kind: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        conn.channel().queue_declare(queue, durable=True, arguments=ARGUMENTS[kind])
    finally:
        conn.close()


def delete(url: str, queue: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        conn.channel().queue_delete(queue)
    finally:
        conn.close()


# ---------------------------------------------------------------- publishing


def loadgen(
    port: int, queue: str, n: int, window: int, sample_every: int, kind: str
) -> dict[str, Any]:
    """One Go load generator publishing ``n`` messages with confirms (persistent ones to a
    quorum queue); its JSON line."""
    args = [
        str(kit.loadgen()),
        "-port",
        str(port),
        "-queue",
        queue,
        "-mode",
        "publish",
        "-no-declare",
        "-keep",
        "-n",
        str(n),
        "-size",
        "100",
        "-window",
        str(window),
        "-sample-every",
        str(sample_every),
        "-unique-props",
    ]
    if kind == "quorum":
        args.append("-persistent")
    got = subprocess.run(args, capture_output=True, text=True, timeout=900)
    lines = got.stdout.strip().splitlines()
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {"error": got.stderr.strip()}
    if got.returncode != 0 or result.get("error"):
        raise RuntimeError(f"loadgen on port {port}: {result.get('error') or got.stderr}")
    return result


def publish_case(
    side: Side, queue: str, kind: str, n: int, window: int, sample_every: int
) -> dict[str, float]:
    """``n`` confirmed messages through the leader (node 0): rate, confirm latency, CPU."""
    cpu0, extra0 = side.cpu_s(), side.extra_cpu_s()
    t0 = time.perf_counter()
    got = loadgen(side.ports()[0], queue, n, window, sample_every, kind)
    wall = time.perf_counter() - t0
    cpu, extra = side.cpu_s() - cpu0, side.extra_cpu_s() - extra0
    out = {
        "msgs_per_s": round(n / float(got.get("wall_secs") or wall)),
        "confirm_p50_ms": round(float(got["confirm_p50_us"]) / 1e3, 3),
        "confirm_p99_ms": round(float(got["confirm_p99_us"]) / 1e3, 3),
        "server_cpu_us_per_msg": round(cpu / n * 1e6, 2),
        "server_cores_used": round(cpu / wall, 2),
    }
    if isinstance(side, SieveSide):
        out["etcd_cpu_us_per_msg"] = round(extra / n * 1e6, 2)
    return out


def one_round(side: Side, kind: str, tag: str, samples: int, n: int) -> dict[str, Any]:
    queue = f"repl-{kind}-{tag}"
    declare(side.urls()[0], queue, kind)
    _wait(lambda: side.settled(queue, kind), f"{side.name} {queue} members online")
    row: dict[str, Any] = {"system": side.name, "kind": kind}
    row["one_at_a_time"] = publish_case(side, queue, kind, samples, 1, 1)
    row["pipelined"] = publish_case(side, queue, kind, n, WINDOW, 16)
    if isinstance(side, SieveSide) and kind == "quorum":  # (after the timing) truly copied
        copy = side.nodes[1]
        _wait(lambda: len(live_ids(copy, queue) or ()) == samples + n, "a replica holds all")
    delete(side.urls()[0], queue)
    return row


# ---------------------------------------------------------------- failover


@dataclass
class Confirmed:
    """What one failover client saw: when its first basic.ack came (None: none in time)."""

    at: float | None = None
    nacks: int = 0
    channels_reopened: int = 0
    reconnects: int = 0


PERSISTENT = aiormq.spec.Basic.Properties(delivery_mode=2)


async def _first_confirm(url: str, queue: str, timeout: float, reopen: bool) -> Confirmed:
    """Publish through ``url`` with confirms until a message is acked, a message every 50 ms
    (each may be acked later: the first ack counts); a dropped channel or connection is
    opened again. ``reopen``: a nack also makes the client open a fresh channel (a RabbitMQ
    3.10.8 channel that published to a quorum queue while its leader was down keeps
    nacking: measured with ``reopen`` off)."""
    seen = Confirmed()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection = await aiormq.connect(url)
        except (aiormq.exceptions.AMQPError, OSError):
            seen.reconnects += 1
            await asyncio.sleep(0.05)
            continue
        pending: set[asyncio.Future[Any]] = set()
        try:
            ch = await connection.channel(publisher_confirms=True)
            while time.monotonic() < deadline:
                sent = time.monotonic()
                publish = ch.basic_publish(b"x" * 100, routing_key=queue, properties=PERSISTENT)
                pending.add(asyncio.ensure_future(publish))
                done, pending = await asyncio.wait(
                    pending, timeout=PACE_S, return_when=asyncio.FIRST_COMPLETED
                )
                nacked = False
                for fut in done:
                    error = fut.exception()
                    if error is None and isinstance(fut.result(), aiormq.spec.Basic.Ack):
                        seen.at = time.monotonic()
                        return seen
                    if isinstance(error, aiormq.exceptions.DeliveryError):
                        nacked = True
                        seen.nacks += 1
                    elif error is not None:
                        raise error
                await asyncio.sleep(max(0.0, sent + PACE_S - time.monotonic()))
                if nacked and reopen:
                    for fut in pending:
                        fut.cancel()
                    pending = set()
                    await ch.close()
                    ch = await connection.channel(publisher_confirms=True)
                    seen.channels_reopened += 1
        except DROPPED:
            seen.reconnects += 1
            await asyncio.sleep(0.05)
        finally:
            for fut in pending:
                fut.cancel()
            if not connection.is_closed:
                with suppress(*DROPPED):
                    await connection.close()
    return seen


async def _both_clients(url: str, queue: str, timeout: float, same_timeout: float) -> Any:
    return await asyncio.gather(
        _first_confirm(url, queue, timeout, reopen=True),
        _first_confirm(url, queue, same_timeout, reopen=False),
    )


def failover_round(side: Side, kind: str, r: int, same_timeout: float) -> dict[str, Any]:
    """Kill the leader of a new queue (the nodes take turns), time the first confirm after."""
    victim, via = r % 3, (r + 1) % 3
    queue = f"failover-{kind}-{r}"
    declare(side.urls()[victim], queue, kind)
    _wait(lambda: side.settled(queue, kind), f"{side.name} {queue} members online")
    loadgen(side.ports()[victim], queue, BEFORE_KILL, 500, 16, kind)
    leader = side.leader(queue, victim)
    killed = time.monotonic()  # kill() sends SIGKILL first, then reaps
    side.kill(victim)
    reopening, same = asyncio.run(_both_clients(side.urls()[via], queue, 180.0, same_timeout))
    if reopening.at is None:
        raise TimeoutError(f"{side.name}: no confirm on {queue} within 180 s of the SIGKILL")
    started = time.monotonic()
    side.restart(victim, queue, kind, via)
    row = {
        "system": side.name,
        "kind": kind,
        "round": r,
        "killed_leader": leader,
        "failover_s": round(reopening.at - killed, 3),
        "nacks": reopening.nacks,
        "channels_reopened": reopening.channels_reopened,
        "reconnects": reopening.reconnects,
        # a client that keeps its channel after nacks (None: no ack within same_timeout)
        "same_channel_failover_s": None if same.at is None else round(same.at - killed, 3),
        "same_channel_nacks": same.nacks,
        "victim_back_s": round(time.monotonic() - started, 3),
    }
    delete(side.urls()[via], queue)
    return row


# ---------------------------------------------------------------- the report


def medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every figure per (system, kind, case) over the rounds."""
    out: dict[str, Any] = {}
    for row in rows:
        for case in ("one_at_a_time", "pipelined"):
            key = f"{row['system']}/{row['kind']}/{case}"
            out.setdefault(key, []).append(row[case])
    return {
        key: {fig: round(statistics.median(r[fig] for r in runs), 3) for fig in runs[0]}
        for key, runs in out.items()
    }


def ratios(rows: list[dict[str, Any]], kinds: list[str]) -> list[dict[str, Any]]:
    """SieveMQ over RabbitMQ within each round (both measured minutes apart)."""
    out = []
    rounds = sorted({row["round"] for row in rows})
    for r in rounds:
        for kind in kinds:
            mine = [x for x in rows if x["round"] == r and x["system"] == "sievemq"]
            theirs = [x for x in rows if x["round"] == r and x["system"] == "rabbitmq"]
            ours = next((x for x in mine if x["kind"] == kind), None)
            other = next((x for x in theirs if x["kind"] == kind), None)
            if ours is None or other is None:
                continue
            entry: dict[str, Any] = {"round": r, "sievemq": ours["kind"], "rabbitmq": kind}
            for case in ("one_at_a_time", "pipelined"):
                entry[case] = {
                    fig: round(ours[case][fig] / other[case][fig], 3)
                    for fig in ours[case]
                    if fig in other[case] and other[case][fig]
                }
            out.append(entry)
    return out


def failover_medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, list[float]] = {}
    for row in rows:
        out.setdefault(f"{row['system']}/{row['kind']}", []).append(row["failover_s"])
    return {
        key: {"median_s": round(statistics.median(v), 3), "max_s": max(v), "runs": len(v)}
        for key, v in out.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2000, help="one-at-a-time messages")
    parser.add_argument("--n", type=int, default=50_000, help="pipelined messages")
    parser.add_argument("--failover-rounds", type=int, default=3)
    parser.add_argument("--kinds", default="stream,quorum")
    parser.add_argument("--lease-ttl", type=int, default=5, help="SieveMQ's --cluster-lease-ttl")
    parser.add_argument(
        "--same-channel-timeout",
        type=float,
        default=30.0,
        help="seconds the failover client that keeps its channel after nacks waits for an ack",
    )
    parser.add_argument(
        "--sievemq-fsync", choices=("batch", "always"), default="batch", help="SieveMQ's --fsync"
    )
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args()
    kinds = [k for k in opts.kinds.split(",") if k]
    if not rabbitmq_cluster.available():  # Debian's package, installed as the other benches do
        subprocess.run([str(kit.RABBITMQ_SH), "--install-only"], check=True)
    kit.loadgen()  # built before anything starts
    # SIGTERM unwinds like Ctrl-C, so every node, epmd and etcd is stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    rows: list[dict[str, Any]] = []
    failovers: list[dict[str, Any]] = []
    with ExitStack() as stack:
        base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sievemq-repl-rmq-")))
        sieve = sievemq_cluster(base, opts.lease_ttl, opts.sievemq_fsync)
        sides: list[Side] = [stack.enter_context(sieve)]
        sides.append(stack.enter_context(rabbit_cluster()))
        for r in range(opts.rounds):
            for kind in kinds:
                for side in sides if r % 2 == 0 else sides[::-1]:
                    row = one_round(side, kind, f"{r}-{time.time_ns()}", opts.samples, opts.n)
                    row["round"] = r
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        for r in range(opts.failover_rounds):
            for kind in kinds:
                for side in sides:
                    row = failover_round(side, kind, r, opts.same_channel_timeout)
                    print(json.dumps(row), flush=True)
                    failovers.append(row)
    result = {
        "bench": "replication_vs_rabbitmq",
        "commit": git_commit(),
        "machine": machine(),
        "load_average": os.getloadavg(),
        "rabbitmq": rabbitmq_cluster.version(),
        "quorum_publishes": "persistent (delivery-mode 2)",
        "samples": opts.samples,
        "n": opts.n,
        "sievemq_lease_ttl_s": opts.lease_ttl,
        "sievemq_fsync": opts.sievemq_fsync,
        "medians": medians(rows),
        "ratios_sievemq_over_rabbitmq": ratios(rows, kinds),
        "failover": failover_medians(failovers),
        "runs": rows,
        "failover_runs": failovers,
    }
    text = json.dumps(result, indent=2)
    if opts.out:
        opts.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
