"""Quorum queues replicated: three real nodes, a real etcd; pika, aiormq and the HTTP API.

A quorum queue declared on ``a`` gets ``b`` and ``c`` as replicas
(``x-quorum-initial-group-size``, default 3); each keeps the queue's log in the directory a
local quorum queue of that name would use (``DATA_DIR/queues/VHOST/NAME``), read here
through ``storage.queue_log.Snapshot`` (read-only, while the node runs). Confirmed publishes
(through the leader, forwarded through another node, and over HTTP) are on a majority when
confirmed and on every replica soon after; acks and a purge on the leader settle them on
the replicas, and a delete removes their copies; thousands of publishes pipelined at once
are all confirmed, on a majority when the last ack comes, and every copy's segments end
byte-identical to the leader's; with both replicas SIGSTOPped a publish is
not confirmed (nor delivered) until one returns; a replica SIGKILLed while messages are
published and acked catches up once restarted. (A negative check waits a fixed while: a
slow machine can only make it pass more slowly, never fail it.)
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import aiormq
import httpx
import pika
import pytest

from sievemq.storage import layout
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.queue_files import live_bodies

from .cluster_helpers import (
    WAIT_S,
    channel,
    queues,
    running,
    started_nodes,
    stopped,
    until,
)

NAMES = ("a", "b", "c")
QUIET_S = 3.0  # how long a held confirm or delivery must stay away
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def copy_of(node: ServerProcess, name: str) -> dict[int, bytes]:
    """The live messages (id -> body) of the queue's log on ``node``, read from its files."""
    return live_bodies(node.data_dir, "/", name)


def bodies(node: ServerProcess, name: str) -> list[bytes]:
    found = copy_of(node, name)
    return [found[i] for i in sorted(found)]


def declare(node: ServerProcess, name: str, **arguments: Any) -> None:
    """A quorum queue on ``node``, once ``node`` sees every node running (a node SIGSTOPped
    by a test before lost its lease: it would not be chosen as a replica)."""
    until(lambda: all(running(node).values()), "every node is running again")
    channel(node).queue_declare(
        name, durable=True, arguments={"x-queue-type": "quorum", **arguments}
    )


def confirmed(node: ServerProcess, name: str, texts: list[str]) -> None:
    """Publish persistent messages with confirms through ``node`` (pika raises on a nack)."""
    ch = channel(node)
    ch.confirm_delivery()
    for text in texts:
        ch.basic_publish("", name, text.encode(), PERSISTENT, mandatory=True)


def test_members_and_confirmed_publishes_on_every_replica(nodes: dict[str, ServerProcess]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(a, "orders")
    for node in (a, b, c):
        row = until(
            lambda n=node: queues(n).get("orders", {}).get("online") == ["a", "b", "c"],
            "orders lists a, b, c online",
        )
        assert row
        shown = queues(node)["orders"]
        assert shown["type"] == "quorum"
        assert (shown["leader"], shown["members"]) == ("a", ["a", "b", "c"])

    texts = [f"m{i}" for i in range(300)]
    confirmed(a, "orders", texts[:200])
    # a majority holds every confirmed message when its confirm comes
    assert max(len(copy_of(b, "orders")), len(copy_of(c, "orders"))) == 200
    confirmed(b, "orders", texts[200:299])  # forwarded to the leader, confirmed after its commit
    response = httpx.post(
        a.admin_url + "/api/exchanges/%2F/amq.default/publish",
        auth=("guest", "guest"),
        json={
            "properties": {"delivery_mode": 2},
            "routing_key": "orders",
            "payload": texts[299],
            "payload_encoding": "string",
        },
        timeout=WAIT_S,
    )
    assert response.json() == {"routed": True}
    want = [t.encode() for t in texts]
    for node in (a, b, c):
        until(lambda n=node: bodies(n, "orders") == want, f"{node.data_dir.name} holds all 300")
    # the same ids and record bytes on every copy
    assert copy_of(a, "orders") == copy_of(b, "orders") == copy_of(c, "orders")


def test_acks_and_a_purge_on_the_leader_settle_on_the_replicas(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(a, "acked")
    confirmed(a, "acked", [f"m{i}" for i in range(100)])
    ch = channel(a)
    for _ in range(40):
        method, _props, _body = ch.basic_get("acked")
        assert method is not None
        ch.basic_ack(method.delivery_tag)
    left = [f"m{i}".encode() for i in range(40, 100)]
    for node in (b, c):
        until(lambda n=node: bodies(n, "acked") == left, "the 40 acked are settled on a replica")
    # through another node (the link to the leader): acks settle there too
    other = channel(b)
    for _ in range(10):
        method, _props, _body = other.basic_get("acked")
        assert method is not None
        other.basic_ack(method.delivery_tag)
    for node in (b, c):
        until(lambda n=node: bodies(n, "acked") == left[10:], "10 more acked through b")
    ch.queue_purge("acked")
    for node in (b, c):
        until(lambda n=node: copy_of(n, "acked") == {}, "purged on a replica")
    confirmed(a, "acked", ["after"])
    for node in (b, c):
        until(lambda n=node: bodies(n, "acked") == [b"after"], "a publish after the purge")
    channel(c).queue_delete("acked")  # through a replica's node: the copies go too
    for node in (b, c):
        copy = layout.queue_directory(node.data_dir, "/", "acked")
        until(lambda d=copy: not d.exists(), "a deleted queue's copy is removed")


async def test_no_majority_no_confirm_until_a_replica_returns(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(a, "held")
    connection = await aiormq.connect(a.url)
    try:
        pub = await connection.channel(publisher_confirms=True)
        sub = await connection.channel()
        got: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
            await got.put(message.body)
            await sub.basic_ack(message.delivery_tag)

        await sub.basic_consume("held", on_message)
        props = aiormq.spec.Basic.Properties(delivery_mode=2)
        first = await asyncio.wait_for(
            pub.basic_publish(b"one", routing_key="held", properties=props), WAIT_S
        )
        assert isinstance(first, aiormq.spec.Basic.Ack)
        assert await asyncio.wait_for(got.get(), WAIT_S) == b"one"
        with stopped(b, c):
            held = asyncio.ensure_future(
                pub.basic_publish(b"two", routing_key="held", properties=props)
            )
            done, _ = await asyncio.wait([held], timeout=QUIET_S)
            assert not done, "confirmed while no replica could hold it"
            assert got.empty(), "a consumer got a message no majority holds"
            os.kill(c.pid, signal.SIGCONT)  # one replica back: a majority again
            confirm = await asyncio.wait_for(held, WAIT_S)
            assert isinstance(confirm, aiormq.spec.Basic.Ack)
            assert await asyncio.wait_for(got.get(), WAIT_S) == b"two"
    finally:
        await connection.close()


async def test_many_pipelined_publishes_all_confirmed_and_copies_equal(
    nodes: dict[str, ServerProcess],
) -> None:
    """Two channels with thousands of publishes in flight at once (each turn's writes
    shipped as they are written, each record stored on the replicas as it came): every one
    is acked, a majority holds them all when the last ack comes, and every copy ends with
    the leader's records, byte for byte."""
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(a, "pipelined")
    props = aiormq.spec.Basic.Properties(delivery_mode=2)
    connection = await aiormq.connect(a.url)
    try:
        channels = [await connection.channel(publisher_confirms=True) for _ in range(2)]
        confirms = await asyncio.wait_for(
            asyncio.gather(
                *(
                    ch.basic_publish(
                        f"{k}-{i}".encode() * 8, routing_key="pipelined", properties=props
                    )
                    for i in range(2500)
                    for k, ch in enumerate(channels)
                )
            ),
            WAIT_S * 4,
        )
    finally:
        await connection.close()
    assert all(isinstance(confirm, aiormq.spec.Basic.Ack) for confirm in confirms)
    assert max(len(copy_of(b, "pipelined")), len(copy_of(c, "pipelined"))) == 5000
    for node in (b, c):
        until(lambda n=node: len(copy_of(n, "pipelined")) == 5000, "a replica holds all 5000")
    assert copy_of(a, "pipelined") == copy_of(b, "pipelined") == copy_of(c, "pipelined")
    for node in (b, c):
        assert segments(node, "pipelined") == segments(a, "pipelined")


def segments(node: ServerProcess, name: str) -> dict[str, bytes]:
    """The queue's segment files on ``node`` (name -> bytes)."""
    directory = layout.queue_directory(node.data_dir, "/", name)
    return {p.name: p.read_bytes() for p in directory.glob("*.qseg")}


def test_a_replica_that_was_down_catches_up(nodes: dict[str, ServerProcess]) -> None:
    a, c = nodes["a"], nodes["c"]
    declare(a, "later")
    confirmed(a, "later", [f"m{i}" for i in range(100)])
    until(lambda: len(copy_of(c, "later")) == 100, "c holds the first 100")
    c.kill()  # SIGKILL
    try:
        confirmed(a, "later", [f"n{i}" for i in range(150)])  # a and b: a majority
        ch = channel(a)
        for _ in range(60):  # settles ids c holds and ids it never got
            method, _props, _body = ch.basic_get("later")
            assert method is not None
            ch.basic_ack(method.delivery_tag)
    finally:
        c.restart()
    want = [f"m{i}".encode() for i in range(60, 100)] + [f"n{i}".encode() for i in range(150)]
    assert bodies(a, "later") == want
    until(lambda: bodies(c, "later") == want, "the restarted replica caught up")
    assert copy_of(c, "later") == copy_of(a, "later")


def test_group_size_one_has_no_replica_and_zero_is_a_406(nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    declare(a, "alone", **{"x-quorum-initial-group-size": 1})
    until(lambda: queues(b).get("alone", {}).get("members") == ["a"], "alone has one member")
    confirmed(a, "alone", ["x"])
    assert copy_of(b, "alone") == {}
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        declare(a, "zero", **{"x-quorum-initial-group-size": 0})
    assert closed.value.reply_code == 406
    assert "x-quorum-initial-group-size" in closed.value.reply_text


def test_two_members_under_fsync_always(
    etcd: EtcdProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two more nodes with ``--fsync always``: the replica fdatasyncs each batch (in a worker
    thread) before it says it holds it; with two members both hold every confirmed message
    when its confirm comes. (y holds no queue yet, so it is x's replica beside a, b, c.)"""
    base = tmp_path_factory.mktemp("always")
    with started_nodes(etcd, base, ("x", "y"), ("--fsync", "always")) as procs:
        x, y = procs["x"], procs["y"]
        declare(x, "synced", **{"x-quorum-initial-group-size": 2})
        until(lambda: queues(y).get("synced", {}).get("online") == ["x", "y"], "y replica")
        confirmed(x, "synced", [f"s{i}" for i in range(200)])
        assert bodies(y, "synced") == [f"s{i}".encode() for i in range(200)]
        assert copy_of(y, "synced") == copy_of(x, "synced")
