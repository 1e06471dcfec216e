"""Stream replicas: three real nodes and a real etcd; aiormq and pika publish, rstream reads.

``x-initial-cluster-size`` (default 3) picks a stream's replicas when it is declared; each
replica node follows the leader through the Stream protocol and appends every chunk as the
leader stored it, so its segment files are byte-identical to the leader's. A replica killed
while the leader takes publishes resumes from its own tail when it comes back. Metadata lists
the replicas, which serve Stream-protocol subscribers from their copy.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import aiormq
import pytest
from pika.exceptions import ChannelClosedByBroker
from rstream import AMQPMessage, Consumer, MessageContext, amqp_decoder, exceptions

from sievemq.cluster.replication import replica_directory
from sievemq.spark.stream_client import StreamClient, StreamURI
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.stream_client import consumer, open_client
from sievemq.testing.wait import eventually

from .cluster_helpers import (
    channel,
    copy_of,
    led_by,
    queues,
    started_nodes,
    stopped,
    until,
    until_async,
)

STREAM = {"x-queue-type": "stream"}
MESSAGES = 10_000
FILTERS = 20


NAMES = ("a", "b", "c")  # the nodes of this module (conftest.nodes)


def identical(leader: ServerProcess, replica: ServerProcess, name: str) -> bool:
    """``replica``'s copy of stream ``name`` has the leader's segment files, byte for byte."""
    theirs = led_by(leader, name)
    return bool(theirs) and copy_of(replica, name) == theirs


async def publish(node: ServerProcess, name: str, first: int, count: int) -> None:
    """``count`` confirmed messages with filter values, pipelined in batches."""
    connection = await aiormq.connect(node.url)
    try:
        ch = await connection.channel(publisher_confirms=True)
        for start in range(first, first + count, 500):
            confirms = [
                asyncio.ensure_future(
                    ch.basic_publish(
                        f"message {i}".encode() * 4,
                        routing_key=name,
                        properties=aiormq.spec.Basic.Properties(
                            headers={"x-stream-filter-value": f"f{i % FILTERS}"}
                        ),
                    )
                )
                for i in range(start, min(start + 500, first + count))
            ]
            for confirm in await asyncio.gather(*confirms):
                assert isinstance(confirm, aiormq.spec.Basic.Ack)
    finally:
        await connection.close()


def declare(node: ServerProcess, name: str, size: int | None = None) -> None:
    arguments: dict[str, object] = dict(STREAM)
    if size is not None:
        arguments["x-initial-cluster-size"] = size
    channel(node).queue_declare(name, durable=True, arguments=arguments)


async def test_replicas_on_every_node_hold_the_leader_s_files(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(a, "replicated", 3)
    for node in nodes.values():
        row = until(
            lambda n=node: (
                queues(n).get("replicated", {}).get("online")  # type: ignore[misc]
                == ["a", "b", "c"]
            ),
            "every node lists a, b, c as the stream's members, online",
        )
        assert row
    assert queues(b)["replicated"]["members"] == ["a", "b", "c"]
    assert queues(a)["replicated"]["leader"] == "a"

    await publish(a, "replicated", 0, MESSAGES)
    for replica in (b, c):
        until(lambda r=replica: identical(a, r, "replicated"), "the replica's files = the leader's")

    # Metadata, on any node, names the leader and both replicas
    client = await open_client(c)
    try:
        leader, replicas = await client.query_leader_and_replicas("replicated")
        assert leader.port == a.stream_port
        assert sorted(r.port for r in replicas) == sorted([b.stream_port, c.stream_port])
    finally:
        await client.close()

    # a replica takes a subscriber itself (it reads its own copy), where a node without
    # one answers 6 (test_cluster_size_one_has_no_replica)
    direct = await open_client(b)
    try:
        await direct.subscribe("replicated", 1)
    finally:
        await direct.close()
    # and answers StreamStats from its copy (the Spark network mode reads a replica so)
    uri = StreamURI.parse(f"rabbitmq-stream://guest:guest@{b.host}:{b.stream_port}/%2F")
    with StreamClient(uri) as spark:
        assert spark.stream_stats("replicated").end == MESSAGES


async def test_rstream_consumer_reads_a_replica_metadata_names(
    nodes: dict[str, ServerProcess],
) -> None:
    a = nodes["a"]
    declare(a, "read-anywhere")
    await publish(a, "read-anywhere", 0, 50)
    until(
        lambda: all(identical(a, nodes[n], "read-anywhere") for n in ("b", "c")),
        "both replicas caught up",
    )
    got: list[bytes] = []

    async def on_message(msg: AMQPMessage, ctx: MessageContext) -> None:
        got.append(bytes(msg.body))

    reader: Consumer = consumer(a)  # goes to a replica: RabbitMQ's clients prefer them
    await reader.start()
    try:
        await reader.subscribe("read-anywhere", on_message, decoder=amqp_decoder)
        await eventually(lambda: len(got) == 50)
    finally:
        await reader.close()
    assert got == [f"message {i}".encode() * 4 for i in range(50)]


async def test_a_replica_killed_while_publishing_catches_up(
    nodes: dict[str, ServerProcess],
) -> None:
    a, c = nodes["a"], nodes["c"]
    declare(a, "survivor")
    until(lambda: queues(c).get("survivor", {}).get("online") == ["a", "b", "c"], "3 members")
    half = threading.Event()
    done: list[BaseException | None] = []

    def publisher() -> None:
        async def run() -> None:
            await publish(a, "survivor", 0, MESSAGES // 2)
            half.set()
            await publish(a, "survivor", MESSAGES // 2, MESSAGES // 2)

        try:
            asyncio.run(run())
            done.append(None)
        except BaseException as error:  # reported by the test below
            done.append(error)

    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        assert half.wait(120)
        c.kill()  # SIGKILL, while the publisher goes on
        c.restart()
    finally:
        thread.join(300)
    assert done == [None]
    until(lambda: identical(a, c, "survivor"), "the restarted replica caught up, byte-identical")
    until(lambda: identical(a, nodes["b"], "survivor"), "the other replica too")


async def test_a_returning_replica_is_not_waited_for_while_it_catches_up(
    nodes: dict[str, ServerProcess],
) -> None:
    """A replica that comes back to a backlog copies it in the background (paced: the
    backlog is committed already); the leader's confirms need only the replica that holds
    each chunk, so they go on even while the returning one is stopped mid-way, and the
    returning copy ends byte-identical, backlog and new messages alike."""
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(a, "returning")
    until(lambda: queues(a).get("returning", {}).get("online") == ["a", "b", "c"], "3 members")
    c.stop()
    await publish(a, "returning", 0, MESSAGES)  # the backlog: a and b are the majority
    c.start()
    until(lambda: queues(a).get("returning", {}).get("online") == ["a", "b", "c"], "c back")
    with stopped(c):  # however far its copy got: confirms go on without it
        await publish(a, "returning", MESSAGES, 1_000)
    await publish(a, "returning", MESSAGES + 1_000, 1_000)
    until(lambda: identical(a, c, "returning"), "the returning replica caught up")
    until(lambda: identical(a, b, "returning"), "the other replica holds the same")


async def test_a_returning_replica_catches_up_while_a_publisher_goes_on(
    nodes: dict[str, ServerProcess],
) -> None:
    """The catch-up gives way to live publishes (while they come its turns take a tenth of
    the leader's loop: ``CatchUpPacer``), yet both go on: a publisher that keeps
    publishing is never refused and gets confirms once the replica is back, the returning
    copy gets through the backlog with the publisher still at work, and it ends
    byte-identical to the leader's, backlog and live messages in the leader's order."""
    a, c = nodes["a"], nodes["c"]
    declare(a, "busy-return")
    until(lambda: queues(a).get("busy-return", {}).get("online") == ["a", "b", "c"], "3 members")
    c.stop()
    await publish(a, "busy-return", 0, MESSAGES)
    backlog = sum(len(data) for data in led_by(a, "busy-return").values())
    confirmed = 0
    stop = asyncio.Event()

    async def steady() -> None:
        nonlocal confirmed
        connection = await aiormq.connect(a.url)
        try:
            ch = await connection.channel(publisher_confirms=True)
            while not stop.is_set():
                window = [
                    ch.basic_publish(b"live %d" % (confirmed + i), routing_key="busy-return")
                    for i in range(50)
                ]
                for confirm in await asyncio.gather(*window):
                    assert isinstance(confirm, aiormq.spec.Basic.Ack)
                confirmed += len(window)
        finally:
            await connection.close()

    publisher = asyncio.ensure_future(steady())
    try:
        await until_async(lambda: _positive(confirmed), "the publisher's first confirms")
        c.start()
        at_start = confirmed
        await until_async(
            lambda: _at_least(lambda: sum(map(len, copy_of(c, "busy-return").values())), backlog),
            "the returning copy got through the backlog",
        )
        assert not publisher.done()  # it went on throughout
        await until_async(lambda: _positive(confirmed - at_start), "confirms during the catch-up")
    finally:
        stop.set()
        await publisher
    until(lambda: identical(a, c, "busy-return"), "the returning replica caught up")


async def _positive(n: int) -> bool:
    return n > 0


async def _at_least(size: Callable[[], int], target: int) -> bool:
    return await asyncio.to_thread(size) >= target


async def test_cluster_size_one_has_no_replica(nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    declare(a, "alone", 1)
    row = until(lambda: queues(b).get("alone"), "b lists the stream")
    assert (row["members"], row["online"]) == (["a"], ["a"])
    await publish(a, "alone", 0, 10)
    client = await open_client(b)
    try:
        leader, replicas = await client.query_leader_and_replicas("alone")
        assert (leader.port, replicas) == (a.stream_port, [])
        with pytest.raises(exceptions.StreamNotAvailable):  # no copy on b: go to the leader
            await client.subscribe("alone", 1)
    finally:
        await client.close()
    assert not replica_directory(b.data_dir, "/", "alone").exists()


def test_invalid_cluster_size_is_a_406_naming_it(nodes: dict[str, ServerProcess]) -> None:
    with pytest.raises(ChannelClosedByBroker) as refused:
        declare(nodes["a"], "bad-size", 0)
    assert refused.value.reply_code == 406
    assert "x-initial-cluster-size" in refused.value.reply_text


async def test_replicas_under_fsync_always(
    etcd: EtcdProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two more nodes with ``--fsync always``: the replica writes (and fdatasyncs) each chunk
    in a worker thread, and its copy still equals the leader's. (y holds no stream yet, so
    it is the replica even beside a, b and c, which hold the earlier tests' streams.)"""
    base = tmp_path_factory.mktemp("always")
    with started_nodes(etcd, base, ("x", "y"), ("--fsync", "always")) as procs:
        x, y = procs["x"], procs["y"]
        declare(x, "durable-copy", 2)
        until(lambda: queues(y).get("durable-copy", {}).get("online") == ["x", "y"], "y replica")
        await publish(x, "durable-copy", 0, 2000)
        until(lambda: identical(x, y, "durable-copy"), "y's copy equals x's")
