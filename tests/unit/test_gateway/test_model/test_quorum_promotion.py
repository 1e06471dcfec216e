"""A quorum queue rebuilt from a copy of its log on another node (a failover's promotion):
the copy, where that node's own queue of the name keeps its log, is opened as the live
queue; ready = not settled, what the old leader had handed out comes back redelivered and
counted as returned, the counts it held kept, the delivery limit honoured; the queue is in
that node's definitions (a restart brings it back); detached again, its files stay."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sievemq.amqp.errors import PreconditionFailed
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.classic.message import QueueMessage
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.storage.layout import queue_directory

from .queue_helpers import PERSISTENT, take_all

ARGS = {"x-queue-type": "quorum", "x-delivery-limit": 2}


def take(queue: ClassicQueue) -> QueueMessage:
    msg = queue.take()
    assert msg is not None
    return msg


def leader_state(data_dir: Path) -> None:
    """On the old leader: m0..m5 published; m0, m1 acked; m2 returned once and waiting;
    m3 returned twice and held again (its third delivery); m4 held; m5 never handed out."""
    broker = Broker(data_dir)
    queue, _, _ = broker.vhost("/").declare_queue("q", arguments=ARGS)
    assert isinstance(queue, ClassicQueue)
    assert all(queue.enqueue([("", "q", PERSISTENT, b"m%d" % i) for i in range(6)]))
    m0, m1, m2, m3, _m4 = (take(queue) for _ in range(5))
    queue.ack([m0, m1])
    queue.requeue([m2, m3])
    again = [take(queue), take(queue)]  # m2, m3 again (by id)
    assert [m.body for m in again] == [b"m2", b"m3"]
    queue.requeue(again)
    m2b, m3b = take(queue), take(queue)
    assert (m2b.delivery_count, m3b.delivery_count) == (2, 2)
    queue.requeue([m2b])  # m2: returned (count 3 > 2: dead-lettered by the limit)
    broker.close()


def test_copy_opened_as_the_live_queue(tmp_path: Path) -> None:
    leader_state(tmp_path / "a")
    source = queue_directory(tmp_path / "a", "/", "q")
    copy = queue_directory(tmp_path / "b", "/", "q")
    replica = Broker(tmp_path / "b")  # a node holding the replica's copy (not a queue yet)
    shutil.copytree(source, copy)
    local = replica.vhost("/").classic
    assert "q" not in local.queues

    queue = local.open_copy("q", ARGS)
    assert local.queues["q"] is queue and queue.kind == "quorum"
    assert queue.message_count == 3  # m3 (held), m4 (held), m5
    got = [(m.body, m.delivery_count, m.redelivered) for m in take_all(queue)]
    # m3: returned twice then held: 3 returns, past the limit of 2 (never delivered)
    assert got == [(b"m4", 1, True), (b"m5", 0, False)]
    with pytest.raises(PreconditionFailed):
        local.open_copy("q", ARGS)
    replica.close()

    restarted = Broker(tmp_path / "b")  # in the definitions now: restored with its log
    queue = restarted.vhost("/").classic.queues["q"]
    # m4 and m5 were handed out by the new leader and not settled: back again
    assert [(m.body, m.delivery_count) for m in take_all(queue)] == [(b"m4", 2), (b"m5", 1)]
    restarted.close()


def test_detached_queue_keeps_its_files_and_leaves_the_definitions(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    local = broker.vhost("/").classic
    queue, _, _ = broker.vhost("/").declare_queue("q", arguments=ARGS)
    assert isinstance(queue, ClassicQueue)
    assert all(queue.enqueue([("", "q", PERSISTENT, b"x")]))
    cancelled: list[ClassicQueue] = []
    queue.add_delete_listener(cancelled.append)
    assert local.detach("q") is queue
    assert cancelled == [queue] and "q" not in local.queues
    assert local.detach("q") is None
    broker.close()
    assert any(queue_directory(tmp_path, "/", "q").glob("*.qseg"))
    again = Broker(tmp_path)
    assert "q" not in again.vhost("/").classic.queues
    again.close()
