"""Quorum-queue failover: three real nodes and a real etcd (2 s lease TTL); pika clients.

A quorum queue led by ``a`` with replicas on ``b`` and ``c``: a consumer on ``a`` returned
one message and holds it again with nine more, acked ten; ``a`` is SIGKILLed. A replica
with the most of the log wins the election (epoch 2, by compare-and-swap), opens its copy as
the queue, and a consumer through the other survivor gets every confirmed, unacked message:
the held ones redelivered with their counts (one more return: their consumer went with
``a``), the rest as they were; publishes go on to the new leader. ``a`` restarted gives the
queue up (its copy goes, to be copied afresh) and forwards to the new leader.

The replicas' copies are the quorum replication's (``cluster/quorum_replication.py``):
the log, its settlements, its delivered mark and its delivery counts, shipped as ``a`` wrote
them; the test only waits until both replicas hold everything before the kill.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pika
import pytest
from pika.exceptions import NackError

from sievemq.storage.layout import queue_directory
from sievemq.storage.queue_log import Snapshot, read_counts
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import WAIT_S, channel, queues, until

QUEUE = "qq"
ARGS = {"x-queue-type": "quorum", "x-delivery-limit": 5}
PERSISTENT = pika.BasicProperties(delivery_mode=2)

pytestmark = pytest.mark.timeout(300)


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
    etcd: EtcdProcess, fresh_nodes: dict[str, ServerProcess]
) -> None:
    a, b, c = fresh_nodes["a"], fresh_nodes["b"], fresh_nodes["c"]
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
    until(lambda: _copies_caught_up(a, (b, c)), "b and c hold a's log, counts and acks")
    a.kill()

    def leader() -> str | None:
        got = queues(c).get(QUEUE, {})
        return got.get("leader") if got.get("leader_epoch") == 2 else None

    new_name = until(leader, "a replica leads the quorum queue (epoch 2)")
    assert new_name in ("b", "c")
    new = fresh_nodes[new_name]
    other = c if new is b else b
    assert queues(other)[QUEUE]["leader"] == new_name
    # (the record is written, and seen by the others, a moment before the copy is opened)
    rebuilt = "rebuilt from this node's copy: 90 ready"
    until(lambda: rebuilt in new.stderr(), f"{new_name} logs '{rebuilt}'")

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


def _copies_caught_up(leader: ServerProcess, replicas: tuple[ServerProcess, ...]) -> bool:
    """Every replica's copy has the leader's live ids and delivery counts (read from the
    files, as a promotion reads them)."""
    want = _live_and_counts(leader)
    return all(_live_and_counts(replica) == want for replica in replicas)


def _live_and_counts(node: ServerProcess) -> tuple[set[int], dict[int, tuple[int, bool]]]:
    directory = queue_directory(node.data_dir, "/", QUEUE)
    if not directory.is_dir():
        return set(), {}
    snapshot = Snapshot(directory, 1 << 62, 1 << 62)
    snapshot.open()
    live: set[int] = set()
    for first in snapshot.firsts:
        for low, high in snapshot.segment(first)[0]:
            live.update(range(low, high + 1))
    counts = {i: c for i, c in read_counts(directory).items() if i in live}
    return live, counts


def leader_of_is(node: ServerProcess, name: str) -> bool:
    return queues(node).get(QUEUE, {}).get("leader") == name


def test_leader_cut_from_etcd_fences_its_quorum_queue(
    etcd: EtcdProcess, fresh_nodes: dict[str, ServerProcess]
) -> None:
    """A leader that cannot renew its lease for a TTL may have been replaced: it nacks every
    publish to its replicated quorum queues (nothing written) until etcd answers and the
    record says it still leads."""
    a = fresh_nodes["a"]
    assert etcd.proc is not None
    channel(a).queue_declare("fenced", durable=True, arguments=ARGS)  # replicas b and c
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
