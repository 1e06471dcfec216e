"""Quorum queues' copies as a failover sees them (``cluster.quorum_failover``): a copy's tail
(the epoch of its last entry, the next log id it lacks), its promotion into the live queue
(epoch history written beside the log, the queue in the definitions, gated as led), and the
old leader giving the queue up (its copy dropped)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any, cast

from pamqp import commands

from sievemq.cluster.epochs import read_history
from sievemq.cluster.placement import Placement
from sievemq.cluster.quorum_failover import QuorumCopies
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.definitions import encode_value
from sievemq.storage.layout import queue_directory

PERSISTENT: bytes = commands.Basic.Properties(delivery_mode=2).marshal()
ARGS = {"x-queue-type": "quorum"}
Q = ("/", "q")


class FakePlacement:
    me = "b"

    def __init__(self) -> None:
        self.gated: list[tuple[tuple[str, str], dict[str, Any]]] = []
        self.floors: list[tuple[tuple[str, str], int]] = []

    def promoted(self, queue: tuple[str, str], floor: int) -> None:
        self.floors.append((queue, floor))

    def led(self, queue: tuple[str, str], record: dict[str, Any]) -> None:
        self.gated.append((queue, record))


def copies_on(broker: Broker) -> tuple[QuorumCopies, FakePlacement]:
    fake = FakePlacement()
    placement = cast(Placement, fake)
    return QuorumCopies(placement, broker), fake


def leader_log(data_dir: Path, n: int, handed_out: int) -> None:
    broker = Broker(data_dir)
    queue, _, _ = broker.vhost("/").declare_queue("q", arguments=ARGS)
    assert isinstance(queue, ClassicQueue)
    assert all(queue.enqueue([("", "q", PERSISTENT, b"m%d" % i) for i in range(n)]))
    for _ in range(handed_out):
        assert queue.take() is not None
    broker.close()


def test_tail_promotion_and_hand_over(tmp_path: Path) -> None:
    leader_log(tmp_path / "a", 7, 3)
    replica = Broker(tmp_path / "b")
    copies, fake = copies_on(replica)
    assert not copies.holds_copy(Q)
    assert copies.tail(Q) == (0, 0)
    shutil.copytree(queue_directory(tmp_path / "a", *Q), queue_directory(tmp_path / "b", *Q))
    assert copies.holds_copy(Q)
    assert copies.tail(Q) == (1, 8)  # epoch 1 wrote ids 1..7: 8 is the next

    record = {"leader": "b", "epoch": 2, "type": "quorum", "arguments": encode_value(ARGS)}
    asyncio.run(copies.promote(Q, record, [(1, 0), (2, 8)], None))
    queue = replica.vhost("/").classic.queues["q"]
    assert queue.message_count == 7
    assert [m.redelivered for m in iter(queue.take, None)] == [True] * 3 + [False] * 4
    assert read_history(queue_directory(tmp_path / "b", *Q)) == [(1, 0), (2, 8)]
    assert fake.gated == [(Q, record)]
    assert copies.tail(Q) == (1, 8)  # the new epoch wrote nothing yet

    moved = {"leader": "c", "epoch": 3, "type": "quorum", "replicas": ["b"]}
    assert copies.hand_over(Q, moved)
    assert "q" not in replica.vhost("/").classic.queues
    assert not queue_directory(tmp_path / "b", *Q).exists()  # copied afresh from c
    assert not copies.hand_over(Q, moved)
    replica.close()


class FakeReplication:
    """The quorum replication's face to a failover: followers by queue, ``release``."""

    def __init__(self) -> None:
        self.followers: dict[tuple[str, str], Any] = {}
        self.released: list[tuple[str, str]] = []

    async def release(self, queue: tuple[str, str]) -> None:
        self.followers.pop(queue, None)
        self.released.append(queue)


def test_a_follower_is_released_before_its_copy_opens(tmp_path: Path) -> None:
    leader_log(tmp_path / "a", 2, 0)
    replica = Broker(tmp_path / "b")
    following = FakeReplication()
    copies = QuorumCopies(cast(Placement, FakePlacement()), replica, following)
    following.followers[Q] = object()  # following, its copy not written yet
    assert copies.holds_copy(Q)
    shutil.copytree(queue_directory(tmp_path / "a", *Q), queue_directory(tmp_path / "b", *Q))
    record = {"leader": "b", "epoch": 2, "type": "quorum", "arguments": encode_value(ARGS)}
    asyncio.run(copies.promote(Q, record, [(1, 0), (2, 3)], None))
    assert following.released == [Q] and not following.followers
    assert replica.vhost("/").classic.queues["q"].message_count == 2
    replica.close()


def test_an_elected_copy_commits_from_the_election_floor(tmp_path: Path) -> None:
    """A copy elected away from a leader cut from it: what the election knows a majority
    holds (ids below the floor) is committed at once, the rest waits for the replicas."""
    leader_log(tmp_path / "a", 6, 0)
    replica = Broker(tmp_path / "b")
    copies, fake = copies_on(replica)
    shutil.copytree(queue_directory(tmp_path / "a", *Q), queue_directory(tmp_path / "b", *Q))
    record = {"leader": "b", "epoch": 2, "type": "quorum", "arguments": encode_value(ARGS)}
    asyncio.run(copies.promote(Q, record, [(1, 0), (2, 7)], 5))
    assert fake.floors == [(Q, 5)]  # told before the record's ``led`` gates the queue
    queue = replica.vhost("/").classic.queues["q"]
    queue.gate(5)  # (what ``Commits`` does with that floor)
    assert [m.body for m in iter(queue.take, None)] == [b"m0", b"m1", b"m2", b"m3"]
    queue.commit(7)  # the replicas hold the rest
    assert [m.body for m in iter(queue.take, None)] == [b"m4", b"m5"]
    replica.close()
