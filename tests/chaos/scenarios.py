"""The faults, one small function each: make the fault, hold it while the workload runs,
heal it. ``Chaos.fault`` records when it began and healed, waits until the cluster has
recovered (every node listed running by every node, every publisher confirming again) and
measures the longest pause in the confirms of the publishers the fault should not touch.

Every stream of the workload is declared on node a, with replicas on b and c; a follower
is a node that leads none of them now. The leader's faults (SIGKILL, SIGSTOP past the
lease, isolation, cut from etcd only) wait until another node leads (failover).

With three etcd members (``--etcd-members 3``) three more: one member SIGKILLed, one cut
from the other two (the nodes still reach it: it answers them "no leader"), and two of three
SIGKILLed (etcd's majority lost, then regained). The first two must cost no node its lease:
a lease lost, or a stream fenced, during them is a finding.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from tests.integration.test_cluster.fault_load import wait_for_progress

from .checkers import longest_gap
from .cluster import ChaosCluster, until
from .netns import Network

LEADER = "a"  # where the workload's streams are declared (and led, until a failover)
NODES = ("a", "b", "c")
LEADER_VICTIM = "leader"  # among a fault's victims: the streams' leader is faulted
STEP = 10  # confirms each publisher adds to count as going on
PROGRESS_S = 120.0  # generous: a loaded machine; returns as soon as it holds


@dataclass
class Chaos:
    """What a scenario works with: the cluster, its network, the clients, the record."""

    cluster: ChaosCluster
    net: Network
    publishers: list[Any]  # fault_load.Publisher and workload.StreamPublisher
    streams: tuple[str, ...]  # the workload's streams (a follower leads none of them)
    via: dict[int, str]  # id(publisher) -> the node it is connected to
    rng: random.Random
    hold_s: float  # a fault is held half to all of this once the others are seen going on
    log: IO[str] | None = None  # history.jsonl, written as it happens
    t0: float = field(default_factory=time.monotonic)
    history: list[dict[str, Any]] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # seen during a fault (run.py reports)
    # publishers that must confirm again after each heal, whose pauses are not measured (the
    # quorum queue's: they move from node to node, and it fails over on its own)
    quorum: list[Any] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)  # the current fault's own figures
    started: float = 0.0  # when the current fault began (monotonic)

    def record(self, event: str, **fields: Any) -> None:
        entry = {"t": round(time.monotonic() - self.t0, 3), "event": event, **fields}
        self.history.append(entry)
        if self.log is not None:
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()

    def leaders(self) -> set[str]:
        """The nodes leading the workload's streams now, as b lists them."""
        listed = self.cluster.queues("b")
        return {listed[s]["leader"] for s in self.streams}

    def follower(self) -> str:
        """A node that holds copies of the workload's streams but leads none (after a
        failover that split them, any node but one leader)."""
        leaders = self.leaders()
        others = sorted(set(NODES) - leaders) or sorted(set(NODES) - {min(leaders)})
        return self.rng.choice(others)

    def untouched(self, victims: tuple[str, ...]) -> list[Any]:
        """Publishers the fault leaves alone: not connected to a victim node. With etcd
        among the victims, only the classic queue's: a replicated stream takes no publishes
        while its leader cannot renew its lease (it fences them). With node a among them
        (the leader, or a follower after a failover), only the streams' through the other
        nodes: the classic queue lives on a, and those through b are forwarded to it."""
        if "etcd" in victims:
            return [p for p in self.publishers if getattr(p, "kind", "stream") == "classic"]
        alive = [p for p in self.publishers if self.via[id(p)] not in victims]
        if LEADER in victims:
            alive = [p for p in alive if getattr(p, "kind", "stream") != "classic"]
        return alive

    def hold(self, victims: tuple[str, ...]) -> None:
        """The rest of the cluster is seen going on, then the fault lasts a while longer."""
        wait_for_progress(self.untouched(victims), STEP, timeout=PROGRESS_S)
        time.sleep(self.rng.uniform(self.hold_s / 2, self.hold_s))

    def listed_stopped(self, victim: str) -> None:
        judge = next(n for n in NODES if n != victim)
        until(
            lambda: self.cluster.running(judge).get(victim) is False,
            f"{judge} lists {victim} stopped",
        )

    @contextlib.contextmanager
    def fault(self, name: str, *victims: str, **details: Any) -> Iterator[None]:
        start = self.started = time.monotonic()
        self.notes = {}
        self.record("fault", fault=name, victims=list(victims), **details)
        yield
        healed = time.monotonic()
        self.record("healed", fault=name)
        self.cluster.wait_all_running()
        wait_for_progress([*self.publishers, *self.quorum], STEP, timeout=PROGRESS_S)
        end = time.monotonic()
        gap = max(
            (longest_gap(p.confirm_times, start, end) for p in self.untouched(victims)),
            default=0.0,
        )
        figures = {
            "fault": name,
            "victims": list(victims),
            **details,
            **self.notes,
            "held_s": round(healed - start, 3),
            "recovered_s": round(end - healed, 3),
            "longest_confirm_gap_s": round(gap, 3),
        }
        self.faults.append(figures)
        self.record("recovered", **figures)


def kill_follower(ch: Chaos) -> None:
    victim = ch.follower()
    with ch.fault("kill-follower", victim):
        ch.cluster.nodes[victim].kill()
        ch.listed_stopped(victim)
        ch.hold((victim,))
        ch.cluster.restart(victim)  # on its data


def stop_follower(ch: Chaos) -> None:
    """SIGSTOP past the lease TTL: listed stopped, then SIGCONT (the same process)."""
    victim = ch.follower()
    pid = ch.cluster.nodes[victim].pid
    with ch.fault("stop-follower", victim):
        os.kill(pid, signal.SIGSTOP)
        try:
            ch.listed_stopped(victim)
            ch.hold((victim,))
        finally:
            os.kill(pid, signal.SIGCONT)


def kill_etcd(ch: Chaos) -> None:
    """Every etcd member SIGKILLed, then restarted on its data."""
    with ch.fault("kill-etcd", "etcd"):
        for member in ch.cluster.etcds:
            member.kill()
        try:
            ch.hold(("etcd",))
        finally:
            ch.cluster.start_etcd()


def isolate_follower(ch: Chaos) -> None:
    """A follower cut from the other nodes and from etcd (its clients still reach it)."""
    victim = ch.follower()
    others = ch.cluster.hosts(*(n for n in (*NODES, "etcd") if n != victim))
    with ch.fault("isolate-follower", victim):
        ch.net.isolate(ch.cluster.host(victim), others)
        try:
            ch.listed_stopped(victim)
            ch.hold((victim,))
        finally:
            ch.net.heal()


def follower_cut_from_nodes(ch: Chaos) -> None:
    """A follower that reaches etcd (its lease lives on: it is listed running) but no
    other node: its links and its copies' subscriptions stall until the cut heals."""
    victim = ch.follower()
    others = [ch.cluster.host(n) for n in NODES if n != victim]
    with ch.fault("follower-cut-from-nodes", victim):
        ch.net.isolate(ch.cluster.host(victim), others)
        try:
            ch.hold((victim,))
        finally:
            ch.net.heal()


def follower_cut_from_etcd(ch: Chaos) -> None:
    """A follower that still reaches the other nodes but not etcd: it loses its lease."""
    victim = ch.follower()
    before = ch.cluster.lease_losses(victim)
    with ch.fault("follower-cut-from-etcd", victim):
        ch.net.isolate(ch.cluster.host(victim), ch.cluster.etcd_hosts())
        try:
            until(lambda: ch.cluster.lease_losses(victim) > before, f"{victim} loses its lease")
            ch.hold((victim,))
        finally:
            ch.net.heal()


def ring(ch: Chaos) -> None:
    """The leader and one follower cannot reach each other, the third node reaches both:
    every node still sees a majority (itself and one other), etcd sees everyone."""
    victim = ch.follower()
    leader = min(ch.leaders())
    with ch.fault("ring", victim):
        ch.net.cut(ch.cluster.host(leader), ch.cluster.host(victim))
        try:
            ch.hold((victim,))
        finally:
            ch.net.heal()


def clock_jump(ch: Chaos) -> None:
    """A node's wall clock stepped an hour forward, then an hour back, then right again
    (the monotonic clock untouched, as an NTP step): each step is seen in its etcd record."""
    victim = ch.rng.choice(NODES)
    clock = ch.cluster.clocks[victim]
    with ch.fault("clock-jump", victim):
        try:
            for jump, later in (("+3600", True), ("-3600", False)):
                clock.write_text(jump + "\n")

                def stepped(later: bool = later) -> bool:
                    skew = ch.cluster.published_at(victim) - time.time()
                    return skew > 1800 if later else skew < -1800

                until(stepped, f"{victim}'s record stamped {jump} s off")
                ch.hold(())
        finally:
            clock.write_text("+0\n")


def the_leader(ch: Chaos) -> str:
    """The node leading the workload's first stream now."""
    return str(ch.cluster.queues(LEADER)[ch.streams[0]]["leader"])


def new_leader(ch: Chaos, old: str) -> None:
    """Another node leads the workload's first stream (the failover happened)."""
    judge = next(n for n in NODES if n != old)
    until(
        lambda: ch.cluster.queues(judge)[ch.streams[0]]["leader"] != old,
        f"a node other than {old} leads {ch.streams[0]}",
    )
    # from the fault to another node listed leading (polled every 0.2 s)
    ch.notes["failover_s"] = round(time.monotonic() - ch.started, 3)


def quorum_led_by(ch: Chaos, node: str) -> str | None:
    """The workload's quorum queue when ``node`` leads it now (None: another node does)."""
    queue = next((str(p.queue) for p in ch.quorum if hasattr(p, "queue")), None)
    if queue is None:
        return None
    judge = next(n for n in NODES if n != node)
    return queue if ch.cluster.queues(judge).get(queue, {}).get("leader") == node else None


def new_quorum_leader(ch: Chaos, queue: str, old: str) -> None:
    """Another node leads the quorum queue (its replicas elected one)."""
    judge = next(n for n in NODES if n != old)
    until(
        lambda: ch.cluster.queues(judge)[queue]["leader"] != old,
        f"a node other than {old} leads {queue}",
    )
    ch.notes["quorum_failover_s"] = round(time.monotonic() - ch.started, 3)


@contextlib.contextmanager
def _partitioned(ch: Chaos, node: str, others: list[str]) -> Iterator[None]:
    """``node`` cut from ``others`` for the block, healed after it."""
    ch.net.isolate(ch.cluster.host(node), [ch.cluster.host(n) for n in others])
    try:
        yield
    finally:
        ch.net.heal()


def leader_cut_from_nodes(ch: Chaos) -> None:
    """The leader reaches etcd (its lease holds: it is listed running) but neither replica:
    they hear nothing from it past the lease's TTL and elect one of them (a majority), the
    old leader reads the new record from etcd and hands over; once the cut heals it follows
    the new leader, its copy cut back to what the new epoch kept. The quorum queue, when the
    victim leads it too, goes the same way (its replicas hear no feed, not even its beats)."""
    victim = the_leader(ch)
    replicas = [n for n in NODES if n != victim]
    quorum = quorum_led_by(ch, victim)
    with (
        ch.fault("leader-cut-from-nodes", victim, LEADER_VICTIM, quorum=quorum),
        _partitioned(ch, victim, replicas),  # (healed first, then the fault waits)
    ):
        new_leader(ch, victim)
        if quorum is not None:
            new_quorum_leader(ch, quorum, victim)
        ch.hold((victim, LEADER_VICTIM))


STAGGER_S = 3.5  # between the two cuts: the replicas' silences begin this far apart


def leader_cut_from_nodes_staggered(ch: Chaos) -> None:
    """As ``leader-cut-from-nodes``, but the leader is cut from one replica, then from the
    other ``STAGGER_S`` later: their silences, and so their elections, begin that far
    apart (the 30-minute runs saw such replicas alternate elections that each counted only
    its own tail, and the leader was never replaced)."""
    victim = the_leader(ch)
    first, second = [n for n in NODES if n != victim]
    quorum = quorum_led_by(ch, victim)
    with (
        ch.fault("leader-cut-from-nodes-staggered", victim, LEADER_VICTIM, quorum=quorum),
        _partitioned(ch, victim, [first]),
    ):
        time.sleep(STAGGER_S)
        ch.net.isolate(ch.cluster.host(victim), [ch.cluster.host(second)])
        new_leader(ch, victim)
        if quorum is not None:
            new_quorum_leader(ch, quorum, victim)
        ch.hold((victim, LEADER_VICTIM))


def leaders_of_all(ch: Chaos, judge: str) -> dict[str, str]:
    """Every replicated queue of the workload (its streams and quorum queue) -> its leader,
    as ``judge`` lists them."""
    listed = ch.cluster.queues(judge)
    names = [*ch.streams, *(str(p.queue) for p in ch.quorum if hasattr(p, "queue"))]
    return {name: str(listed[name]["leader"]) for name in names if name in listed}


def nodes_apart(ch: Chaos) -> None:
    """Every node cut from both others, each still reaching etcd: every replica loses its
    leader, but none reaches another member that could follow it, so none offers a tail
    and every leader stays (a 30-minute run saw an old leader cut from both others win back
    106 streams this way, which nobody could then follow until the cut healed). Publishes
    wait meanwhile (no replica acknowledges them) and are confirmed after the heal. A
    leader that changed is a finding."""
    before = leaders_of_all(ch, "b")
    hosts = [ch.cluster.host(n) for n in NODES]
    with ch.fault("nodes-apart", *NODES, LEADER_VICTIM):
        for i, host in enumerate(hosts):
            ch.net.isolate(host, hosts[i + 1 :])
        try:
            # past the silence at which the replicas count their leaders lost, and an
            # election's round after it
            time.sleep(3 * ch.cluster.lease_ttl_s)
            for judge in NODES:
                after = leaders_of_all(ch, judge)
                moved = {q: f"{before[q]} -> {after[q]}" for q in before if after[q] != before[q]}
                if moved:
                    finding = f"nodes-apart: {judge} lists new leaders nobody could follow: {moved}"
                    ch.findings.append(finding)
                    ch.record("finding", finding=finding)
        finally:
            ch.net.heal()


def kill_leader(ch: Chaos) -> None:
    """SIGKILL of the streams' leader: a replica takes over (failover), the old leader
    comes back on its data as a replica."""
    victim = the_leader(ch)
    with ch.fault("kill-leader", victim, LEADER_VICTIM):
        ch.cluster.nodes[victim].kill()
        new_leader(ch, victim)
        ch.hold((victim, LEADER_VICTIM))
        ch.cluster.restart(victim)


def stop_leader(ch: Chaos) -> None:
    """SIGSTOP of the leader past its lease: a replica takes over; on SIGCONT the old one
    fences and hands over."""
    victim = the_leader(ch)
    pid = ch.cluster.nodes[victim].pid
    with ch.fault("stop-leader", victim, LEADER_VICTIM):
        os.kill(pid, signal.SIGSTOP)
        try:
            new_leader(ch, victim)
            ch.hold((victim, LEADER_VICTIM))
        finally:
            os.kill(pid, signal.SIGCONT)


def isolate_leader(ch: Chaos) -> None:
    """The leader cut from the other nodes and etcd (its clients still reach it): it
    fences, a replica takes over."""
    victim = the_leader(ch)
    others = ch.cluster.hosts(*(n for n in (*NODES, "etcd") if n != victim))
    with ch.fault("isolate-leader", victim, LEADER_VICTIM):
        ch.net.isolate(ch.cluster.host(victim), others)
        try:
            new_leader(ch, victim)
            ch.hold((victim, LEADER_VICTIM))
        finally:
            ch.net.heal()


def leader_cut_from_etcd(ch: Chaos) -> None:
    """The leader reaches the other nodes but not etcd: its lease lapses, it fences, a
    replica takes over."""
    victim = the_leader(ch)
    with ch.fault("leader-cut-from-etcd", victim, LEADER_VICTIM):
        ch.net.isolate(ch.cluster.host(victim), ch.cluster.etcd_hosts())
        try:
            new_leader(ch, victim)
            ch.hold((victim, LEADER_VICTIM))
        finally:
            ch.net.heal()


def halves(ch: Chaos) -> None:
    """The cluster cut in two: one node (the leader or a follower, at random), with one
    etcd member when there are three, against the other two nodes and the rest of etcd.
    The minority's node cannot renew its lease (its member has no leader, or none is
    there); the majority goes on, failing the streams over when the leader is cut off."""
    victim = ch.rng.choice(NODES)
    leading = victim == the_leader(ch)
    victims = (victim, LEADER_VICTIM) if leading else (victim,)
    cluster = ch.cluster
    members = list(range(len(cluster.etcds)))
    with_victim = [ch.rng.choice(members)] if len(members) == 3 else []
    minority = [cluster.host(victim), *(cluster.etcds[i].host for i in with_victim)]
    majority_members = [i for i in members if i not in with_victim]
    majority = cluster.hosts(*(n for n in NODES if n != victim))
    majority += [cluster.etcds[i].host for i in majority_members]
    with ch.fault("halves", *victims, etcd_with_victim=[i + 1 for i in with_victim]):
        for host in minority:
            ch.net.isolate(host, majority)
        for i in with_victim:  # etcd members dial each other from 127.0.0.1: by user
            for j in majority_members:
                ch.net.cut_user(*member_address(ch, i), *member_address(ch, j))
        try:
            if leading:
                new_leader(ch, victim)
            else:
                ch.listed_stopped(victim)
            ch.hold(victims)
        finally:
            ch.net.heal()


def member_address(ch: Chaos, index: int) -> tuple[int, str]:
    """(uid, address) of etcd member ``index`` (three members: each its own user)."""
    member = ch.cluster.etcds[index]
    assert member.uid is not None, "a cut between etcd members needs three members"
    return member.uid, member.host


@contextlib.contextmanager
def no_lease_lost(ch: Chaos, fault: str) -> Iterator[None]:
    """The fault must cost no node its lease, nor make it fence its streams."""
    losses = {n: ch.cluster.lease_losses(n) for n in NODES}
    fences = {n: ch.cluster.fences(n) for n in NODES}
    yield
    for n in NODES:
        lost = ch.cluster.lease_losses(n) - losses[n]
        fenced = ch.cluster.fences(n) - fences[n]
        if lost or fenced:
            finding = f"{fault}: node {n} lost its lease {lost} time(s), fenced {fenced} time(s)"
            ch.findings.append(finding)
            ch.record("finding", finding=finding)


def kill_etcd_member(ch: Chaos) -> None:
    """One of three etcd members SIGKILLed (at random: the raft leader or not), restarted
    on its data: the nodes go on with the other two, no lease lost."""
    index = ch.rng.randrange(len(ch.cluster.etcds))
    was_leader = ch.cluster.etcd_leader() == index
    with (
        no_lease_lost(ch, "kill-etcd-member"),
        ch.fault("kill-etcd-member", "etcd-member", member=index + 1, raft_leader=was_leader),
    ):
        ch.cluster.etcds[index].kill()
        try:
            ch.hold(("etcd-member",))
        finally:
            ch.cluster.start_etcd([ch.cluster.etcds[index]])


def partition_etcd_member(ch: Chaos) -> None:
    """One of three etcd members cut from the other two (the nodes still reach it; it has
    no leader, so it answers them 503 "no leader" and they move to another member)."""
    index = ch.rng.randrange(len(ch.cluster.etcds))
    was_leader = ch.cluster.etcd_leader() == index
    others = [i for i in range(len(ch.cluster.etcds)) if i != index]
    with (
        no_lease_lost(ch, "partition-etcd-member"),
        ch.fault("partition-etcd-member", "etcd-member", member=index + 1, raft_leader=was_leader),
    ):
        for other in others:
            ch.net.cut_user(*member_address(ch, index), *member_address(ch, other))
        try:
            ch.hold(("etcd-member",))
        finally:
            ch.net.heal()


def etcd_majority_lost(ch: Chaos) -> None:
    """Two of three etcd members SIGKILLed: etcd serves nobody (as with all of it down),
    then both restarted on their data and etcd serves again."""
    lost = ch.rng.sample(range(len(ch.cluster.etcds)), 2)
    with ch.fault("etcd-majority-lost", "etcd", members=[i + 1 for i in lost]):
        for index in lost:
            ch.cluster.etcds[index].kill()
        try:
            ch.hold(("etcd",))
        finally:
            ch.cluster.start_etcd([ch.cluster.etcds[i] for i in lost])


SCENARIOS: dict[str, Callable[[Chaos], None]] = {
    "kill-follower": kill_follower,
    "stop-follower": stop_follower,
    "kill-etcd": kill_etcd,
    "isolate-follower": isolate_follower,
    "follower-cut-from-nodes": follower_cut_from_nodes,
    "follower-cut-from-etcd": follower_cut_from_etcd,
    "ring": ring,
    "clock-jump": clock_jump,
    "leader-cut-from-nodes": leader_cut_from_nodes,
    "leader-cut-from-nodes-staggered": leader_cut_from_nodes_staggered,
    "kill-leader": kill_leader,
    "stop-leader": stop_leader,
    "isolate-leader": isolate_leader,
    "leader-cut-from-etcd": leader_cut_from_etcd,
    "halves": halves,
    "nodes-apart": nodes_apart,
    "kill-etcd-member": kill_etcd_member,
    "partition-etcd-member": partition_etcd_member,
    "etcd-majority-lost": etcd_majority_lost,
}
# only with three etcd members (--etcd-members 3)
ETCD_MEMBER_SCENARIOS = ("kill-etcd-member", "partition-etcd-member", "etcd-majority-lost")
# the faults that need no failover (the short round runs them and the leader's)
FOLLOWER_SCENARIOS = tuple(
    name
    for name in SCENARIOS
    if "leader" not in name
    and name not in ("halves", "nodes-apart")
    and name not in ETCD_MEMBER_SCENARIOS
)
LEADER_SCENARIOS = ("kill-leader", "stop-leader", "isolate-leader", "leader-cut-from-etcd")
