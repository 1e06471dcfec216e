"""Quorum-queue failover: three real nodes and a real etcd (2 s lease TTL); pika clients.

A quorum queue led by ``a`` with replicas on ``b`` and ``c``: a consumer on ``a`` returned
one message and holds it again with nine more, acked ten; ``a`` is SIGKILLed. A replica
with the most of the log wins the election (epoch 2, by compare-and-swap), opens its copy as
the queue, and a consumer through the other survivor gets every confirmed, unacked message:
the held ones redelivered with their counts (one more return: their consumer went with
``a``), the rest as they were; publishes go on to the new leader. ``a`` restarted gives the
queue up (its copy goes, to be copied afresh) and forwards to the new leader.

The replicas' copies: the quorum replication (``cluster/quorum_replication.py``, built beside
this) keeps each replica's copy of the log in the directory a local queue of the name uses.
Until it runs here, the test stands in for it: it stops ``b`` and ``c`` cleanly before the
kill, copies ``a``'s log directory (as ``a`` left it) into theirs, and starts them again,
so that the election, the rebuild and the clients are what is tested.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.exceptions import NackError

from sievemq.cluster.coordination import EtcdClient
from sievemq.cluster.placement import queue_key
from sievemq.storage.layout import queue_directory
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import WAIT_S, channel, queues, started_nodes, until

QUEUE = "qq"
ARGS = {"x-queue-type": "quorum", "x-delivery-limit": 5}
PERSISTENT = pika.BasicProperties(delivery_mode=2)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def nodes(etcd: EtcdProcess, tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    with started_nodes(etcd, tmp_path, ("a", "b", "c")) as procs:
        yield procs


async def _with_replicas(etcd: EtcdProcess, name: str, replicas: list[str]) -> None:
    client = EtcdClient([etcd.url])
    try:
        found = await client.get(queue_key("/", name))
        assert found is not None
        record = json.loads(found.value)
        if not record.get("replicas"):  # the quorum replication's declare names them
            record["replicas"] = replicas
            assert await client.compare_and_swap(
                queue_key("/", name), found.mod_revision, json.dumps(record)
            )
    finally:
        await client.close()


def confirmed(ch: Any, name: str, body: bytes) -> None:
    """Publish ``body`` with a confirm, again after each nack, until it is confirmed."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            ch.basic_publish("", name, body, PERSISTENT)
            return
        except NackError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def count_of(props: pika.BasicProperties) -> Any:
    return (props.headers or {}).get("x-delivery-count")


def consume_all(
    node: ServerProcess, expect: int, name: str = QUEUE
) -> list[tuple[bytes, Any, bool]]:
    """Every message of the queue through ``node``: (body, x-delivery-count, redelivered)."""
    ch = channel(node)
    ch.basic_qos(prefetch_count=200)
    got: list[tuple[bytes, Any, bool]] = []
    for method, props, body in ch.consume(name, inactivity_timeout=WAIT_S):
        assert method is not None, f"only {len(got)} of {expect} arrived"
        got.append((body, count_of(props), method.redelivered))
        ch.basic_ack(method.delivery_tag)
        if len(got) == expect:
            break
    ch.cancel()
    return got


def test_leader_killed_a_replica_rebuilds_the_queue(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    ch = channel(a)
    ch.queue_declare(QUEUE, durable=True, arguments=ARGS)
    ch.confirm_delivery()
    for i in range(100):
        ch.basic_publish("", QUEUE, b"m%d" % i, PERSISTENT)
    method, _, body = ch.basic_get(QUEUE)
    assert body == b"m0"
    ch.basic_nack(method.delivery_tag, requeue=True)  # returned once
    held = [ch.basic_get(QUEUE) for _ in range(10)]  # m0 again, m1..m9: held at the kill
    assert [body for _, _, body in held] == [b"m%d" % i for i in range(10)]
    for _ in range(10):  # m10..m19 acked: gone for good
        method, _, _ = ch.basic_get(QUEUE)
        ch.basic_ack(method.delivery_tag)
    ch.queue_declare(QUEUE, passive=True)  # a round trip: the acks were processed
    asyncio.run(_with_replicas(etcd, QUEUE, ["b", "c"]))
    for replica in (b, c):
        assert replica.stop() == 0, replica.stderr()
    a.kill()
    for replica in (b, c):  # the replicas' copies: what a's log held at the kill
        target = queue_directory(replica.data_dir, "/", QUEUE)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(queue_directory(a.data_dir, "/", QUEUE), target)
    b.start()
    c.start()

    def leader() -> str | None:
        got = queues(c).get(QUEUE, {})
        return got.get("leader") if got.get("leader_epoch") == 2 else None

    new_name = until(leader, "a replica leads the quorum queue (epoch 2)")
    assert new_name in ("b", "c")
    new = nodes[new_name]
    other = c if new is b else b
    assert queues(other)[QUEUE]["leader"] == new_name
    assert "rebuilt from this node's copy: 90 ready" in new.stderr()

    # publishes go on, through the node that does not lead it (forwarded)
    pub = channel(other)
    pub.confirm_delivery()
    pub.basic_publish("", QUEUE, b"after", PERSISTENT)

    got = consume_all(other, 91)
    assert got[:10] == [(b"m0", 2, True), *((b"m%d" % i, 1, True) for i in range(1, 10))]
    assert got[10:90] == [(b"m%d" % i, None, False) for i in range(20, 100)]
    assert got[90] == (b"after", None, False)

    # the old leader returns: it gives the queue up and forwards to the new leader
    a.start()
    until(lambda: leader_of_is(a, new_name), "a sees the new leader")
    until(lambda: f"is led by {new_name} since epoch 2" in a.stderr(), "a hands the queue over")
    again = channel(a)
    again.confirm_delivery()
    again.basic_publish("", QUEUE, b"through a", PERSISTENT)
    assert consume_all(a, 1) == [(b"through a", None, False)]
    assert queues(a)[QUEUE]["node"] == new_name  # listed as the new leader's, not a's own
    assert not any(queue_directory(a.data_dir, "/", QUEUE).glob("*.qseg"))  # its copy went


def leader_of_is(node: ServerProcess, name: str) -> bool:
    return queues(node).get(QUEUE, {}).get("leader") == name


def test_leader_cut_from_etcd_fences_its_quorum_queue(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    """A leader that cannot renew its lease for a TTL may have been replaced: it nacks every
    publish to its replicated quorum queues (nothing written) until etcd answers and the
    record says it still leads."""
    a = nodes["a"]
    assert etcd.proc is not None
    channel(a).queue_declare("fenced", durable=True, arguments=ARGS)
    asyncio.run(_with_replicas(etcd, "fenced", ["b", "c"]))
    assert a.stop() == 0, a.stderr()
    a.start()  # joins reading the record, its replicas named
    ch = channel(a)
    ch.confirm_delivery()
    # (a node busy starting on a loaded machine may find its 2 s lease stale and fence
    # for a moment: a publish is retried until confirmed)
    confirmed(ch, "fenced", b"before")
    fences = a.stderr().count("cannot be sure it still leads")
    os.kill(etcd.proc.pid, signal.SIGSTOP)
    try:
        until(
            lambda: a.stderr().count("cannot be sure it still leads") > fences,
            "a fences its queue",
        )
        with pytest.raises(NackError):
            ch.basic_publish("", "fenced", b"while etcd is away", PERSISTENT)
    finally:
        os.kill(etcd.proc.pid, signal.SIGCONT)
    confirmed(ch, "fenced", b"after")
    assert consume_all(a, 2, "fenced") == [(b"before", None, False), (b"after", None, False)]
    # the nacked one was never written
    assert channel(a).queue_declare("fenced", passive=True).method.message_count == 0
