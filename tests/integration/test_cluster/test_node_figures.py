"""A node's figures that change only with traffic (its replicas' read counts, its queues'
figures) beside its record in a real etcd.

Two nodes' ``Membership`` in this process, rewriting their records every 0.1 s: ``a``'s
``replica_reads`` part is written to its own key only when it changed (no key while it is
empty; the key's etcd revision stays put while ``a``'s record is rewritten again and again),
and ``b`` sees each value in ``a``'s totals, where ``/api/queues`` reads it; once ``a`` leaves,
its figures go with its lease. Then two real nodes (pika): ``n1``'s record holds no queue
figures, its ``queues`` part does, ``n2``'s ``/api/queues`` shows them, and once the queues
are idle the part is not written again while the record is rewritten (every 10 s).
"""

from __future__ import annotations

import json
from typing import Any

from sievemq.cluster.coordination import EtcdClient
from sievemq.cluster.membership import FIGURES, NODES, Identity, Membership
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import channel, publish_each, queues, until, until_async

KEY = FIGURES + "a/replica_reads"
NAMES = ("n1", "n2")  # the real nodes of this module (conftest.nodes), apart from a and b


def member(etcd: EtcdProcess, name: str, parts: dict[str, Any] | None = None) -> Membership:
    me = Identity(name, f"id-{name}", f"127.0.0.1:{len(name)}")
    return Membership(EtcdClient([etcd.url]), me, 5, dict, publish_interval_s=0.1, parts=parts)


async def rewritten(probe: EtcdClient, name: str, times: int, timeout: float = 30.0) -> None:
    """Until ``name``'s record was seen rewritten ``times`` times (its publish periods)."""
    seen: list[int] = []

    async def moved() -> bool:
        held = await probe.get(NODES + name)
        if held is not None and (not seen or held.mod_revision != seen[-1]):
            seen.append(held.mod_revision)
        return len(seen) > times

    await until_async(moved, f"{name}'s record rewritten {times} times", timeout)


async def revision(probe: EtcdClient, key: str = KEY) -> int | None:
    held = await probe.get(key)
    return None if held is None else held.mod_revision


def totals_on(b: Membership) -> dict[str, Any]:
    return next(n.totals for n in b.node_views() if n.name == "a")


async def test_a_part_is_written_only_when_it_changed_and_seen_by_the_others(
    etcd: EtcdProcess,
) -> None:
    reads: list[list[Any]] = []
    a = member(etcd, "a", {"replica_reads": lambda: [list(r) for r in reads]})
    b = member(etcd, "b")
    probe = EtcdClient([etcd.url])
    await a.join()
    await b.join()
    left = False
    try:
        # no copy read: no key at all, however often the record is rewritten
        await rewritten(probe, "a", 3)
        assert await revision(probe) is None
        assert "replica_reads" not in totals_on(b)

        reads.append(["/", "s1", {"deliver": 5, "deliver_get": 5, "ack": 4, "consumers": 1}])

        async def b_sees(expected: list[list[Any]]) -> bool:
            return totals_on(b).get("replica_reads") == expected

        await until_async(lambda: b_sees(reads), "b sees a's replica reads")
        first = await revision(probe)
        assert first is not None
        # idle: the record goes on being rewritten, the part's key does not
        await rewritten(probe, "a", 3)
        assert await revision(probe) == first

        reads[0][2] = {"deliver": 6, "deliver_get": 6, "ack": 6, "consumers": 1}
        await until_async(lambda: b_sees(reads), "b sees a's new replica reads")
        second = await revision(probe)
        assert second is not None and second > first
        await rewritten(probe, "a", 3)
        assert await revision(probe) == second

        # no longer read: an empty value replaces the old one (written once)
        reads.clear()
        await until_async(lambda: b_sees([]), "b sees a's copies unread")
        third = await revision(probe)
        await rewritten(probe, "a", 3)
        assert await revision(probe) == third

        reads.append(["/", "s2", {"deliver": 1, "deliver_get": 1, "ack": 1, "consumers": 0}])
        await until_async(lambda: b_sees(reads), "b sees a's reads of s2")
        left = True
        await a.leave()  # its lease revoked: its figures go with it

        async def gone() -> bool:
            return "replica_reads" not in totals_on(b) and await revision(probe) is None

        await until_async(gone, "a's figures gone with it")
    finally:
        if not left:
            await a.leave()
        await b.leave()
        await probe.close()


def rates(figures: Any) -> list[float]:
    """Every ``rate`` in a queue's figures (its ``*_details``, nested)."""
    if not isinstance(figures, dict):
        return []
    found = [float(v) for k, v in figures.items() if k == "rate"]
    return found + [r for v in figures.values() for r in rates(v)]


async def test_a_nodes_queue_figures_are_a_part_written_when_they_changed(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    n1, n2 = nodes["n1"], nodes["n2"]
    ch = channel(n1)
    ch.confirm_delivery()
    ch.queue_declare("nf-jobs", durable=True)
    ch.queue_declare("nf-log", durable=True, arguments={"x-queue-type": "stream"})
    publish_each(ch, "nf-jobs", [b"j0", b"j1", b"j2"])
    publish_each(ch, "nf-log", [b"l0", b"l1"])

    def shown(name: str, messages: int) -> dict[str, Any] | None:
        found = queues(n2).get(name)
        return found if found and found.get("messages") == messages else None

    jobs = until(lambda: shown("nf-jobs", 3), "n2 shows n1's queue with its figures")
    assert jobs["node"] == "n1" and jobs["message_stats"]["publish"] == 3
    until(lambda: shown("nf-log", 2), "n2 shows n1's stream with its figures")

    probe = EtcdClient([etcd.url])
    part_key = FIGURES + "n1/queues"
    try:
        record = await probe.get(NODES + "n1")
        assert record is not None
        totals = json.loads(record.value)["totals"]
        assert "overview" in totals and "queues" not in totals  # the record stays small
        part = await probe.get(part_key)
        assert part is not None
        figures = {(v, n): f for v, n, f in json.loads(part.value)}
        assert figures[("/", "nf-jobs")]["messages"] == 3
        assert figures[("/", "nf-log")]["messages"] == 2

        async def idle() -> bool:  # the last publishes' rates gone from what n1 wrote
            held = await probe.get(part_key)
            written = json.loads(held.value) if held is not None else []
            return not any(r for _, name, f in written if name.startswith("nf-") for r in rates(f))

        await until_async(idle, "n1 wrote its queues' rates down to 0", timeout=120)
        first = await revision(probe, part_key)
        # idle: the record is rewritten, its queues' part is not
        await rewritten(probe, "n1", 2, timeout=90)  # every 10 s
        assert await revision(probe, part_key) == first
        assert shown("nf-jobs", 3) is not None  # still shown, from the part
    finally:
        await probe.close()
