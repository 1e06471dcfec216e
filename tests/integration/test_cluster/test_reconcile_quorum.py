"""Quorum queues' replicas re-chosen as nodes join and are forgotten: real etcd, real nodes.

Two nodes a and b; a quorum queue declared with the default group size (3: two members while
only two nodes run), one of size 1 and one of size 2. Messages published with confirms, some
acked. A third node c joins: the first queue gains a replica on c, which copies the queue's
log from its first id (the live messages with the leader's ids and bytes, none of the acked
ones), follows later publishes and counts for the majority (with b SIGSTOPped a publish is
confirmed: a and c hold it); the other two queues gain nothing. c stopped: nothing moves,
and a fourth node d that joins meanwhile gets no replica (the queue is at its size). c
forgotten (its ``sievemq/members/c`` deleted): d takes its place, copies the log and counts
for the majority in turn.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiormq

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import (
    WAIT_S,
    channel,
    declare_sized,
    forgotten,
    joined_node,
    members,
    running,
    sizes_kept,
    stopped,
    stopped_while_one_joins,
    until,
)
from .test_quorum_replication import confirmed
from .test_quorum_replication import copy_of as log_of

ARGS = {"x-queue-type": "quorum"}


async def _confirm(node: ServerProcess, name: str, body: bytes) -> Any:
    """One persistent publish through ``node`` and its confirm (or the timeout's error)."""
    connection = await aiormq.connect(node.url)
    try:
        pub = await connection.channel(publisher_confirms=True)
        props = aiormq.spec.Basic.Properties(delivery_mode=2)
        return await asyncio.wait_for(
            pub.basic_publish(body, routing_key=name, properties=props), WAIT_S
        )
    finally:
        await connection.close()


def confirmed_without(leader: ServerProcess, away: ServerProcess, name: str, body: bytes) -> None:
    """With ``away`` SIGSTOPped, a publish through ``leader`` is confirmed: the third member
    (the one the reconciliation added) holds it."""
    with stopped(away):
        confirm = asyncio.run(_confirm(leader, name, body))
    assert isinstance(confirm, aiormq.spec.Basic.Ack)
    until(lambda: running(leader).get(away.data_dir.name), "the stopped node runs again")


def same_log(a: ServerProcess, other: ServerProcess, name: str, size: int) -> bool:
    """``other``'s copy holds exactly the leader's ``size`` live messages (ids and bytes)."""
    mine = log_of(a, name)
    return len(mine) == size and log_of(other, name) == mine


def test_quorum_replicas_follow_joins_and_forgets(
    etcd: EtcdProcess, cluster: dict[str, ServerProcess]
) -> None:
    a, b, c, d = (cluster[n] for n in "abcd")
    declare_sized(a, ARGS, "x-quorum-initial-group-size")
    confirmed(a, "grown", [f"m{i}" for i in range(300)])
    ch = channel(a)
    for _ in range(50):  # settled before c exists: its catch-up must leave them out
        method, _props, _body = ch.basic_get("grown")
        assert method is not None
        ch.basic_ack(method.delivery_tag)

    joined_node(c, (a, b), "grown", ["a", "b", "c"])  # "grown" had 2 members of 3
    until(lambda: same_log(a, c, "grown", 250), "c's copy of the log equals a's")
    assert sorted(log_of(c, "grown").values()) == sorted(f"m{i}".encode() for i in range(50, 300))
    confirmed(b, "grown", [f"after c {i}" for i in range(100)])  # it follows on
    until(lambda: same_log(a, c, "grown", 350), "c follows a")
    confirmed_without(a, b, "grown", b"b stopped, c holds it")
    until(lambda: same_log(a, c, "grown", 351), "c holds what it confirmed")
    sizes_kept(a)
    assert log_of(c, "single") == log_of(c, "pair") == {}

    # c lost for a while; d joins while "grown" is at its size: no replica on d
    stopped_while_one_joins(c, d, a)
    confirmed(a, "grown", [f"c down {i}" for i in range(100)])  # a and b: a majority
    assert members(a, "grown") == (["a", "b", "c"], ["a", "b"])
    assert members(b, "grown")[0] == ["a", "b", "c"]
    assert log_of(d, "grown") == {}

    forgotten(etcd, "c", (a, b, d), "grown", ["a", "b", "d"])
    until(lambda: same_log(a, d, "grown", 451), "d's copy of the log equals a's")
    confirmed_without(a, b, "grown", b"b stopped, d holds it")
    until(lambda: same_log(a, d, "grown", 452), "d holds what it confirmed")
    sizes_kept(a)
    assert "quorum queue 'grown' in vhost '/': adds a replica on c, which joined" in a.stderr()
    assert "quorum queue 'grown' in vhost '/': replaces c, forgotten, by d" in a.stderr()
