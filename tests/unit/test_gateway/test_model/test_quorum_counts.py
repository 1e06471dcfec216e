"""A durable quorum queue reopened on its log keeps its messages' delivery counts: what a
consumer held comes back ready and redelivered with one more return counted, and
``x-delivery-limit`` is honoured across the reopen (past it: dead-lettered, never
delivered). The same holds past the memory window (bodies read back from the log)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sievemq.gateway.model.classic.message import MemoryWindow, QueueMessage
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.storage.queue_log import DEFAULT_SEGMENT_BYTES

from .queue_helpers import PERSISTENT, logged_queue, take_all


def make(
    directory: Path, arguments: dict[str, Any] | None = None, window: int = 2048
) -> tuple[ClassicQueue, list[tuple[list[QueueMessage], str]]]:
    dead: list[tuple[list[QueueMessage], str]] = []
    queue = logged_queue(
        directory,
        "quorum",
        {"x-queue-type": "quorum", **(arguments or {})},
        MemoryWindow(messages=window, bytes=1 << 20, refill=3),
        dead_letter=lambda q, msgs, reason: dead.append((list(msgs), reason)),
    )
    return queue, dead


def publish(queue: ClassicQueue, n: int) -> None:
    assert all(queue.enqueue([("", "q", PERSISTENT, b"m%d" % i) for i in range(n)]))


def test_counts_and_redelivery_survive_a_reopen(tmp_path: Path) -> None:
    queue, _ = make(tmp_path)
    publish(queue, 4)
    first = take_all(queue)
    queue.requeue([first[0]])  # m0 returned once, waits ready
    queue.requeue([first[1]])
    again = queue.take()
    assert again is not None and again.body == b"m0" and again.delivery_count == 1
    queue.ack([first[3]])  # m3 done; m0 held again, m1 waiting, m2 held
    queue.close()  # the process dies here: its consumers' messages are returned

    reopened, _ = make(tmp_path)
    got = {m.body: (m.delivery_count, m.redelivered) for m in take_all(reopened)}
    assert got == {b"m0": (2, True), b"m1": (1, True), b"m2": (1, True)}


def test_delivery_limit_honoured_across_reopens(tmp_path: Path) -> None:
    queue, _ = make(tmp_path, {"x-delivery-limit": 2})
    publish(queue, 1)
    msg = queue.take()
    assert msg is not None
    queue.requeue([msg])
    msg = queue.take()
    assert msg is not None and msg.delivery_count == 1
    queue.close()  # held: count 2 once reopened, still within the limit

    queue, dead = make(tmp_path, {"x-delivery-limit": 2})
    msg = queue.take()
    assert msg is not None and msg.delivery_count == 2 and msg.redelivered
    queue.close()  # held again: 3, past the limit

    queue, dead = make(tmp_path, {"x-delivery-limit": 2})
    assert queue.message_count == 1  # (dead-lettered when it reaches the head)
    assert queue.take() is None
    assert [(len(m), reason) for m, reason in dead] == [(1, "delivery_limit")]
    assert dead[0][0][0].body == b"m0" and dead[0][0][0].delivery_count == 3
    queue.close()

    queue, dead = make(tmp_path, {"x-delivery-limit": 2})
    assert queue.message_count == 0 and dead == []  # gone for good


def test_counts_of_paged_messages_read_back_from_the_log(tmp_path: Path) -> None:
    queue, _ = make(tmp_path, window=3)
    publish(queue, 12)
    taken = take_all(queue)
    queue.requeue(taken[8:])  # m8..m11 returned once
    queue.close()  # m0..m7 were held

    queue, _ = make(tmp_path, window=3)
    assert queue.paged > 0  # past the window: index entries only
    got = [(m.body, m.delivery_count, m.redelivered) for m in take_all(queue)]
    assert got == [(b"m%d" % i, 1, True) for i in range(12)]


def test_classic_queue_keeps_no_counts(tmp_path: Path) -> None:
    queue = logged_queue(tmp_path, "classic", {}, segment_bytes=DEFAULT_SEGMENT_BYTES)
    publish(queue, 2)
    queue.requeue(take_all(queue))
    queue.close()
    assert not (tmp_path / "counts").exists()
    again = logged_queue(tmp_path, "classic", {}, segment_bytes=DEFAULT_SEGMENT_BYTES)
    assert [(m.delivery_count, m.redelivered) for m in take_all(again)] == [(0, True)] * 2
