"""A node's rarely changing figures (its replicas' read counts) beside its record in a real etcd.

Two nodes' ``Membership`` in this process, rewriting their records every 0.1 s: ``a``'s
``replica_reads`` part is written to its own key only when it changed (no key while it is
empty; the key's etcd revision stays put while ``a``'s record is rewritten again and again),
and ``b`` sees each value in ``a``'s totals, where ``/api/queues`` reads it; once ``a`` leaves,
its figures go with its lease.
"""

from __future__ import annotations

from typing import Any

from sievemq.cluster.coordination import EtcdClient
from sievemq.cluster.membership import FIGURES, NODES, Identity, Membership
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import until_async

KEY = FIGURES + "a/replica_reads"


def member(etcd: EtcdProcess, name: str, parts: dict[str, Any] | None = None) -> Membership:
    me = Identity(name, f"id-{name}", f"127.0.0.1:{len(name)}")
    return Membership(EtcdClient([etcd.url]), me, 5, dict, publish_interval_s=0.1, parts=parts)


async def rewritten(probe: EtcdClient, name: str, times: int) -> None:
    """Until ``name``'s record was seen rewritten ``times`` times (its publish periods)."""
    seen: list[int] = []

    async def moved() -> bool:
        held = await probe.get(NODES + name)
        if held is not None and (not seen or held.mod_revision != seen[-1]):
            seen.append(held.mod_revision)
        return len(seen) > times

    await until_async(moved, f"{name}'s record rewritten {times} times")


async def revision(probe: EtcdClient) -> int | None:
    held = await probe.get(KEY)
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
