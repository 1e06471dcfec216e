"""Run the chaos suite: faults in rounds under load, then the checkers; JSON out.

    python -m tests.chaos.run [--minutes 5] [--rounds R] [--scenarios a,b] [--seed 1]
                              [--hold-s 5] [--artifacts .chaos/RUN_ID]

(``make chaos MINUTES=N``). It runs itself again inside a new network namespace
(``unshare -n``, root), starts etcd and nodes a, b, c there (``cluster.py``), declares two
streams (three copies each, led by a), a classic queue and a quorum queue (three members,
led by a), and starts the workload (``workload.py``, ``quorum_load.py``): AMQP 0-9-1
publishers through the leader and through the followers (forwarded), Stream-protocol
publishers with and without dedup, a named reader through a and one through b, a filtered
reader through c, an rstream reader (on a replica), a declarer, and on the quorum queue two
publishers that resend through the next node after a nack or a drop and two consumers (one
acking all, one giving back every fifth message once). Then rounds: every scenario of
``scenarios.py`` once per round, in a random order, until ``--rounds`` rounds or
``--minutes`` are done (a round, once begun, is finished; a scenario whose cluster does not
come back in time ends the rounds with a finding). Then everything is healed, the clients
stopped, every queue read back on the node that leads it (the quorum queue's copies
compared with its leader's, then drained), and the checkers run.

Artifacts (``--artifacts``, default ``.chaos/<UTC time>``): ``summary.json`` (what is
printed), ``history.jsonl`` (scenarios, faults, heals, recoveries and checker results, with
seconds from the start, written as they happen), ``clients.json`` (every publisher's
confirmed numbers and confirm times, every reader's deliveries, the declarer's declares
with their times, deletes and refusals), the nodes' data and logs
(``nodes/NAME.stderr.N``) and etcd's (``etcd/etcd.log``). Exit status 1 on any finding.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pika.exceptions import AMQPError

from sievemq.testing import ServerProcess
from tests.integration.test_cluster.cluster_helpers import TTL_S
from tests.integration.test_cluster.fault_load import (
    Publisher,
    declare,
    read_messages,
    wait_for_progress,
)

from . import netns
from .checkers import (
    Result,
    Stored,
    check_declared,
    check_publisher,
    check_quorum,
    check_reader,
    longest_gap,
    quorum_copies_equal,
    replicas_equal,
)
from .cluster import ChaosCluster, until
from .quorum_load import QuorumConsumer, QuorumDelivery, QuorumPublisher, drain
from .scenarios import ETCD_MEMBER_SCENARIOS, LEADER, NODES, PROGRESS_S, SCENARIOS, STEP, Chaos
from .workload import Declarer, StreamProtocolReader, StreamPublisher, StreamReader, parse

STREAMS = ("cs-1", "cs-2")
CLASSIC = "cq-1"
QUORUM = "qq-1"
COLORS = ("red", "green", "blue")
FILTER = "red"
PAUSE_S = 0.005  # between one publisher's messages: about 100-200 a second each
QUORUM_PAUSE_S = 0.02  # the quorum queue's publishers: fewer, to keep the short round short
READ_IDLE_S = 2.0  # a read-back ends this long after its last message, once all arrived
READ_TIMEOUT_S = 180.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=0, help="stop after R rounds (0: none)")
    parser.add_argument(
        "--scenarios", default=None, help="default: every one that applies to --etcd-members"
    )
    parser.add_argument("--etcd-members", type=int, choices=(1, 3), default=1)
    parser.add_argument("--lease-ttl", type=int, default=TTL_S, help="the nodes' (seconds)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hold-s", type=float, default=5.0)
    parser.add_argument("--artifacts", type=Path, default=None)
    args = parser.parse_args(argv)
    usable = [s for s in SCENARIOS if args.etcd_members == 3 or s not in ETCD_MEMBER_SCENARIOS]
    args.scenarios = args.scenarios or ",".join(usable)
    unknown = set(args.scenarios.split(",")) - set(usable)
    if unknown:
        parser.error(
            f"unknown scenarios {sorted(unknown)} with {args.etcd_members} etcd member(s); "
            f"known: {', '.join(usable)}"
        )
    if args.artifacts is None:
        args.artifacts = Path(".chaos") / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return args


def read_back(node: ServerProcess, queue: str, kind: str, want: set[tuple[str, int]]) -> Stored:
    """Every message of ``queue`` on ``node`` (a stream from its first offset, a classic
    queue drained), read until all of ``want`` arrived and nothing more comes."""
    bodies = {f"{label}:{seq}".encode() for label, seq in want}
    stored = Stored()
    for offset, body in read_messages(node, queue, kind, bodies, READ_IDLE_S, READ_TIMEOUT_S):
        try:
            label, seq = parse(body)
        except ValueError:
            stored.malformed += 1
        else:
            stored.messages.append((offset, label, seq))
    return stored


class Run:
    """One chaos run: the cluster, the workload, the rounds, the checks."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.base: Path = args.artifacts.resolve()
        self.base.mkdir(parents=True, exist_ok=True)
        self.cluster = ChaosCluster(self.base, args.etcd_members, args.lease_ttl)
        self.rng = random.Random(args.seed)
        self.amqp: list[Publisher] = []
        self.streams: list[StreamPublisher] = []
        self.readers: list[StreamReader] = []
        self.stream_readers: list[StreamProtocolReader] = []
        self.declarer: Declarer | None = None
        self.quorum_pubs: list[QuorumPublisher] = []
        self.quorum_consumers: list[QuorumConsumer] = []
        self.drained: list[QuorumDelivery] = []
        self.chaos: Chaos | None = None
        self.results: dict[str, Result] = {}
        self.stopped = 0.0  # when the clients were stopped (monotonic)

    def publishers(self) -> list[Publisher | StreamPublisher | QuorumPublisher]:
        return [*self.amqp, *self.streams, *self.quorum_pubs]

    def start_workload(self) -> Chaos:
        nodes = self.cluster.nodes
        a = nodes[LEADER]
        for stream in STREAMS:
            declare(a, stream, "stream", copies=3)
        declare(a, CLASSIC, "classic")
        declare(a, QUORUM, "quorum")
        for queue in (*STREAMS, QUORUM):
            until(
                lambda s=queue: (  # (in any order: a loaded machine may fail it over)
                    sorted(self.cluster.queues("c").get(s, {}).get("online") or ()) == list(NODES)
                ),  # type: ignore[misc]
                f"{queue} has its three copies online",
            )
        via: dict[int, str] = {}

        def amqp(queue: str, node: str, kind: str = "stream") -> None:
            pub = Publisher(
                nodes[node],
                queue,
                kind,
                label=f"{queue}/amqp-{node}",
                filter_values=COLORS if kind == "stream" else (),
                pause_s=PAUSE_S,
            )
            self.amqp.append(pub)
            via[id(pub)] = node

        amqp("cs-1", "a")
        amqp("cs-1", "b")  # forwarded to a
        amqp("cs-2", "c")  # forwarded to a
        amqp(CLASSIC, "a", "classic")
        amqp(CLASSIC, "b", "classic")
        for stream, dedup in (("cs-1", True), ("cs-2", False)):
            name = f"{stream}/sp-{'dedup' if dedup else 'plain'}"
            sp = StreamPublisher(a, stream, name, dedup, pause_s=PAUSE_S)
            self.streams.append(sp)
            via[id(sp)] = LEADER
        self.readers = [
            StreamReader(a, "cs-1", "cs-1/named-a", consumer_name="chaos-named-a"),
            StreamReader(nodes["b"], "cs-2", "cs-2/named-b", consumer_name="chaos-named-b"),
            StreamReader(nodes["c"], "cs-1", "cs-1/filtered-c", filter_value=FILTER),
        ]
        self.stream_readers = [StreamProtocolReader(a, "cs-2", "cs-2/rstream")]
        self.declarer = Declarer(nodes, seed=self.args.seed)

        def order(first: str) -> list[ServerProcess]:
            names = ["a", "b", "c"]
            at = names.index(first)
            return [nodes[n] for n in names[at:] + names[:at]]

        self.quorum_pubs = [
            QuorumPublisher(order(n), QUORUM, f"{QUORUM}/amqp-{n}", pause_s=QUORUM_PAUSE_S)
            for n in ("a", "b")
        ]
        self.quorum_consumers = [
            QuorumConsumer(order("b"), QUORUM, f"{QUORUM}/ack-b"),
            QuorumConsumer(order("c"), QUORUM, f"{QUORUM}/requeue-c", requeue_every=5),
        ]
        publishers: list[Any] = [*self.amqp, *self.streams]
        quorum: list[Any] = [*self.quorum_pubs, *self.quorum_consumers]
        for client in (*publishers, *self.readers, *self.stream_readers, self.declarer, *quorum):
            client.start()
        log = (self.base / "history.jsonl").open("w")
        chaos = Chaos(
            self.cluster, netns.Network(), publishers, STREAMS, via, self.rng, self.args.hold_s, log
        )
        chaos.quorum = list(self.quorum_pubs)
        wait_for_progress([*publishers, *self.quorum_pubs], STEP, timeout=PROGRESS_S)
        chaos.record("workload started")
        return chaos

    def rounds(self, chaos: Chaos) -> int:
        names = self.args.scenarios.split(",")
        deadline = time.monotonic() + self.args.minutes * 60
        done = 0
        while True:
            order = list(names)
            self.rng.shuffle(order)
            for name in order:
                chaos.record("scenario", scenario=name, round=done)
                try:
                    SCENARIOS[name](chaos)
                # the cluster did not come back in time (AssertionError), or the harness
                # could not make or heal the fault: a finding, then heal and check
                except Exception as error:
                    text = f"scenario {name} (round {done}): {type(error).__name__}: {error}"
                    chaos.record("scenario failed", scenario=name, error=str(error))
                    self.results[f"scenario {name}"] = Result({}, [text])
                    return done  # heal, then check what there is
            done += 1
            if self.args.rounds and done >= self.args.rounds:
                return done
            if time.monotonic() >= deadline:
                return done

    def heal(self, chaos: Chaos) -> None:
        """Whatever a failed scenario left: cuts healed, clocks right, processes running."""
        chaos.net.heal()
        for clock in self.cluster.clocks.values():
            clock.write_text("+0\n")
        for name, node in self.cluster.nodes.items():
            if node.running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGCONT)
            else:
                self.cluster.restart(name)
        if self.cluster.etcd_down():
            self.cluster.start_etcd(self.cluster.etcd_down())

    def stop_workload(self) -> None:
        self.stopped = self.stopped or time.monotonic()
        for pub in self.publishers():
            pub.stop()
        for reader in (*self.readers, *self.stream_readers, *self.quorum_consumers):
            reader.stop()
        if self.declarer is not None:
            self.declarer.stop()

    def check(self, chaos: Chaos) -> None:
        listed = self.cluster.queues(LEADER, patience_s=READ_TIMEOUT_S)
        self.check_quorum(listed)
        by_queue: dict[str, list[Any]] = {}
        for pub in (*self.amqp, *self.streams):
            by_queue.setdefault(pub.queue, []).append(pub)
        stored: dict[str, Stored] = {}
        for queue, pubs in by_queue.items():
            want = {(p.name, seq) for p in pubs for seq in p.confirmed}
            kind = "classic" if queue == CLASSIC else "stream"
            leader = self.cluster.nodes[listed[queue]["node"]]  # where it is led now
            stored[queue] = read_back(leader, queue, kind, want)
            if stored[queue].malformed:
                self.results[f"{queue}/malformed"] = Result(
                    {"malformed": stored[queue].malformed},
                    [f"{queue}: {stored[queue].malformed} malformed bodies"],
                )
        for pub in self.amqp:
            attempted = set(pub.confirmed) | set(pub.in_doubt) | set(pub.rejected)
            self.results[pub.name] = check_publisher(
                pub.name, pub.confirmed, attempted, stored[pub.queue], dedup=False
            )
        for sp in self.streams:
            self.results[sp.name] = check_publisher(
                sp.name, sp.confirmed, sp.attempted(), stored[sp.queue], dedup=sp.dedup
            )
        filtered = {p.name for p in self.amqp if p.filter_values}

        def red(label: str, seq: int) -> bool:
            return label in filtered and COLORS[seq % len(COLORS)] == FILTER

        for reader in self.readers:
            matches = red if reader.filter_value else None
            self.results[reader.label] = check_reader(
                reader.label, reader.deliveries, stored[reader.stream], matches
            )
        for sp_reader in self.stream_readers:
            self.results[sp_reader.label] = check_reader(
                sp_reader.label, sp_reader.deliveries, stored[sp_reader.queue]
            )
        assert self.declarer is not None
        self.results["declared"] = check_declared(self.declarer.expected(), set(listed))
        self.results["replicas"] = self.check_replicas()
        for name, node in self.cluster.nodes.items():
            logs = "".join(
                p.read_text(errors="replace") for p in node.data_dir.parent.glob(f"{name}.stderr.*")
            )
            if "Traceback" in logs:
                self.results[f"{name}/log"] = Result({}, [f"node {name} logged a traceback"])
        if chaos.findings:
            self.results["during faults"] = Result({}, list(chaos.findings))
        for name, result in self.results.items():
            chaos.record("checked", check=name, **result.figures, findings=result.findings)

    def check_quorum(self, listed: dict[str, dict[str, Any]]) -> None:
        """The quorum queue, its consumers stopped: every copy equal to its leader's, then
        drained on its leader, then every delivery checked."""
        data = {name: node.data_dir for name, node in self.cluster.nodes.items()}
        leader, *replicas = listed[QUORUM]["members"]
        if listed[QUORUM].get("node") != leader:  # (members name the leader first)
            leader = listed[QUORUM]["node"]
            replicas = [m for m in listed[QUORUM]["members"] if m != leader]
        copies = {r: data[r] for r in replicas}
        result = Result({"members": len(copies) + 1, "unequal": 0})

        def equal() -> bool:
            return not any(quorum_copies_equal(data[leader], copies, "/", QUORUM).values())

        try:
            until(equal, f"every copy of {QUORUM} equals its leader's", timeout=120)
        except AssertionError as error:
            result.figures["unequal"] = 1
            differences = quorum_copies_equal(data[leader], copies, "/", QUORUM)
            result.findings.append(f"{error} (leader {leader}): {differences}")
        self.results[f"{QUORUM}/copies"] = result
        self.drained = drain(self.cluster.nodes[leader], QUORUM, READ_IDLE_S, READ_TIMEOUT_S)
        published = {p.name: (p.confirmed, p.attempted()) for p in self.quorum_pubs}
        deliveries = [d for c in self.quorum_consumers for d in c.deliveries] + self.drained
        self.results[QUORUM] = check_quorum(QUORUM, published, deliveries)

    def check_replicas(self) -> Result:
        """Every stream with copies: each copy equals its leader's files once caught up."""
        data = {name: node.data_dir for name, node in self.cluster.nodes.items()}
        streams = {
            q["name"]: q
            for q in self.cluster.get(LEADER, "/api/queues", patience_s=READ_TIMEOUT_S)
            if q.get("type") == "stream" and len(q.get("members") or []) > 1
        }
        result = Result({"streams": len(streams), "unequal": 0})
        for name, row in sorted(streams.items()):
            leader, *replicas = row["members"]
            copies = {r: data[r] for r in replicas}

            def equal(
                name: str = name, leader: str = leader, copies: dict[str, Path] = copies
            ) -> bool:
                return not any(replicas_equal(data[leader], copies, "/", name).values())

            try:
                until(equal, f"every copy of {name} equals its leader's", timeout=120)
            except AssertionError as error:
                result.figures["unequal"] += 1
                differences = replicas_equal(data[leader], copies, "/", name)
                result.findings.append(f"{error} (leader {leader}): {differences}")
        return result

    def summary(self, chaos: Chaos, rounds: int, elapsed: float) -> dict[str, Any]:
        publishers = self.publishers()
        figures = [r.figures for r in self.results.values()]
        per_fault: dict[str, dict[str, Any]] = {}
        for f in chaos.faults:
            row = per_fault.setdefault(
                f["fault"], {"count": 0, "longest_confirm_gap_s": 0.0, "recovered_s_max": 0.0}
            )
            row["count"] += 1
            row["longest_confirm_gap_s"] = max(
                row["longest_confirm_gap_s"], f["longest_confirm_gap_s"]
            )
            row["recovered_s_max"] = max(row["recovered_s_max"], f["recovered_s"])
            if "failover_s" in f:
                row.setdefault("failover_s", []).append(f["failover_s"])
        dedup = [self.results[s.name].figures["duplicates"] for s in self.streams if s.dedup]
        return {
            "run": self.base.name,
            "artifacts": str(self.base),
            "elapsed_s": round(elapsed, 1),
            "etcd_members": self.args.etcd_members,
            "lease_ttl_s": self.args.lease_ttl,
            "rounds": rounds,
            "faults": len(chaos.faults),
            "confirmed": sum(f.get("confirmed", 0) for f in figures),
            "lost": sum(f.get("lost", 0) for f in figures),
            "unexpected": sum(f.get("unexpected", 0) for f in figures),
            "duplicates": sum(f.get("duplicates", 0) for f in figures),
            "duplicates_with_dedup": sum(dedup),
            "gaps": sum(f.get("gaps", 0) for f in figures),
            "deliveries": sum(f.get("deliveries", 0) for f in figures),
            "declared_ok": self.results["declared"].figures["declared_ok"],
            "declared_missing": self.results["declared"].figures["missing"],
            "replicas_unequal": self.results["replicas"].figures["unequal"],
            "quorum": self.results[QUORUM].figures,
            "quorum_copies_unequal": self.results[f"{QUORUM}/copies"].figures["unequal"],
            # the publishers a fault left alone (the figure to watch), and any publisher,
            # those of a node down included, from the start to the end of the workload
            "longest_confirm_gap_s": max(
                (f["longest_confirm_gap_s"] for f in chaos.faults), default=0.0
            ),
            "longest_confirm_gap_any_publisher_s": round(
                max(longest_gap(p.confirm_times, chaos.t0, self.stopped) for p in publishers),
                3,
            ),
            "per_fault": per_fault,
            "findings": [f for r in self.results.values() for f in r.findings],
        }

    def write(self, chaos: Chaos, summary: dict[str, Any]) -> None:
        if chaos.log is not None:
            chaos.log.close()
        clients = {
            "publishers": {
                p.name: {
                    "confirmed": p.confirmed,
                    "confirm_times": [round(t - chaos.t0, 4) for t in p.confirm_times],
                }
                for p in self.publishers()
            },
            "readers": {
                label: [asdict(d) for d in deliveries]
                for label, deliveries in [
                    *((r.label, r.deliveries) for r in self.readers),
                    *((r.label, r.deliveries) for r in self.stream_readers),
                ]
            },
            "quorum": {
                "deliveries": [asdict(d) for c in self.quorum_consumers for d in c.deliveries],
                "drained": [asdict(d) for d in self.drained],
                "publishers": {
                    p.name: {"nacks": p.nacks, "drops": p.drops, "errors": p.errors[-20:]}
                    for p in self.quorum_pubs
                },
            },
            "declarer": {
                "declared": self.declarer.declared if self.declarer else {},
                "deleted": sorted(self.declarer.deleted) if self.declarer else [],
                "delete_in_doubt": sorted(self.declarer.in_doubt) if self.declarer else [],
                "refused": self.declarer.refused if self.declarer else [],
            },
        }
        (self.base / "clients.json").write_text(json.dumps(clients))
        (self.base / "summary.json").write_text(json.dumps(summary, indent=1))

    def run(self) -> dict[str, Any]:
        start = time.monotonic()
        netns.set_up()
        self.cluster.start()
        try:
            chaos = self.chaos = self.start_workload()
            try:
                done = self.rounds(chaos)
            finally:
                self.heal(chaos)
            try:
                self.cluster.wait_all_running()
                wait_for_progress([*chaos.publishers, *chaos.quorum], STEP, timeout=PROGRESS_S)
            except AssertionError as error:  # a finding; what the clients hold is checked
                chaos.record("not recovered", error=str(error))
                self.results["recovery"] = Result({}, [f"after the heal: {error}"])
            self.stop_workload()
            self.check(chaos)
            summary = self.summary(chaos, done, time.monotonic() - start)
            self.write(chaos, summary)
            return summary
        finally:
            with contextlib.suppress(AMQPError, OSError, AssertionError):
                self.stop_workload()
            self.cluster.stop()


def main(argv: list[str]) -> int:
    if not netns.inside():
        return netns.reexec_in_namespace(["-m", "tests.chaos.run", *argv])
    summary = Run(parse_args(argv)).run()
    print(json.dumps(summary, indent=1))
    return 1 if summary["findings"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
