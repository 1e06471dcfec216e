"""The memory window of a durable classic queue: past it, persistent messages keep only an
index entry in memory and are read back from the queue log, with every queue semantic intact
(order, priorities, requeue, TTL, max-length, purge, dead-lettering, recovery)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pamqp import commands

from sievemq.gateway.model.classic.message import MemoryBudget, MemoryWindow, QueueMessage
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.storage.queue_log import QueueLog

from .queue_helpers import logged_queue

WINDOW = MemoryWindow(messages=4, bytes=1 << 20, refill=3)


def props(priority: int | None = None, expiration: str | None = None, mode: int = 2) -> bytes:
    marshalled: bytes = commands.Basic.Properties(
        delivery_mode=mode, priority=priority, expiration=expiration
    ).marshal()
    return marshalled


PERSISTENT = props()
TRANSIENT = props(mode=1)


def make(
    directory: Path,
    arguments: dict[str, Any] | None = None,
    window: MemoryWindow = WINDOW,
    segment_bytes: int = 2000,
    budget: MemoryBudget | None = None,
) -> ClassicQueue:
    return logged_queue(directory, "classic", arguments, window, segment_bytes, budget)


def publish(queue: ClassicQueue, bodies: list[bytes], properties: bytes = PERSISTENT) -> None:
    assert all(queue.enqueue([("ex", "rk", properties, b)]) for b in bodies)


def drain(queue: ClassicQueue) -> list[QueueMessage]:
    out = []
    while (msg := queue.take()) is not None:
        out.append(msg)
        queue.ack([msg])
    return out


def body_list(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() * 20 for i in range(n)]


def test_past_the_window_only_an_index_stays_and_order_is_kept(tmp_path: Path) -> None:
    queue = make(tmp_path)
    bodies = body_list(100)
    publish(queue, bodies[:60])
    publish(queue, [b"transient"], TRANSIENT)  # behind paged messages: in memory, in order
    publish(queue, bodies[60:])
    assert queue.loaded == WINDOW.messages + 1
    assert queue.paged == 100 - WINDOW.messages
    assert queue.message_count == 101
    got = []
    while (msg := queue.take()) is not None:
        got.append(msg.body)
        assert queue.loaded <= WINDOW.messages + WINDOW.refill + 1
        queue.ack([msg])
    assert got == [*bodies[:60], b"transient", *bodies[60:]]
    assert queue.paged == 0 and queue.loaded == 0 and queue.ready_bytes == 0
    assert queue.log is not None and queue.log.segment_count <= 1  # acked segments deleted


def test_byte_window_pages_large_bodies(tmp_path: Path) -> None:
    queue = make(tmp_path, window=MemoryWindow(messages=1000, bytes=3000, refill=1))
    bodies = [bytes([i]) * 1000 for i in range(20)]
    publish(queue, bodies)
    assert queue.loaded_bytes <= 3000 and queue.paged == 17
    assert [m.body for m in drain(queue)] == bodies


def test_priorities_with_paged_messages(tmp_path: Path) -> None:
    queue = make(tmp_path, {"x-max-priority": 3})
    sent = [(i, i % 4) for i in range(40)]
    for i, priority in sent:
        publish(queue, [f"{i}".encode()], props(priority=priority))
    expected = [f"{i}".encode() for p in (3, 2, 1, 0) for i, q in sent if q == p]
    assert [m.body for m in drain(queue)] == expected


def test_requeued_messages_come_first_redelivered(tmp_path: Path) -> None:
    queue = make(tmp_path)
    bodies = body_list(30)
    publish(queue, bodies)
    taken = [queue.take() for _ in range(6)]
    assert all(m is not None for m in taken)
    held = [m for m in taken if m is not None]
    queue.ack(held[:2])
    queue.requeue([held[4], held[2]])
    queue.requeue([held[3], held[5]])
    rest = drain(queue)
    assert [m.body for m in rest] == bodies[2:]
    assert [m.redelivered for m in rest] == [True] * 4 + [False] * 24


def test_ttl_expires_paged_heads_and_dead_letters_them_with_bodies(tmp_path: Path) -> None:
    queue = make(tmp_path, {"x-message-ttl": 1000})
    dead: list[tuple[bytes, str]] = []
    queue.dead_letter = lambda q, msgs, reason: dead.extend((m.body, reason) for m in msgs)
    bodies = body_list(20)
    publish(queue, bodies)
    first_expiry = queue.next_expiry()
    assert first_expiry is not None
    queue.expire(first_expiry + 10_000)
    assert [b for b, _ in dead] == bodies
    assert {r for _, r in dead} == {"expired"}
    assert queue.paged == 0 and queue.take() is None


def test_per_message_expiration_on_a_paged_message(tmp_path: Path) -> None:
    queue = make(tmp_path)
    publish(queue, body_list(10))
    publish(queue, [b"short"], props(expiration="50"))
    publish(queue, [b"last"])
    assert queue.paged == 8
    for msg in [queue.take() for _ in range(10)]:
        assert msg is not None
        queue.ack([msg])
    expiry = queue.next_expiry()  # the paged head's expiry, known without reading it
    assert expiry is not None
    queue.expire(expiry + 1)
    assert [m.body for m in drain(queue)] == [b"last"]


def test_max_length_drop_head_dead_letters_paged_messages(tmp_path: Path) -> None:
    queue = make(tmp_path, {"x-max-length": 10})
    dead: list[bytes] = []
    queue.dead_letter = lambda q, msgs, reason: dead.extend(m.body for m in msgs)
    bodies = body_list(25)
    publish(queue, bodies)
    assert queue.message_count == 10
    assert dead == bodies[:15]
    assert [m.body for m in drain(queue)] == bodies[15:]


def test_max_length_reject_publish_counts_paged_messages(tmp_path: Path) -> None:
    queue = make(tmp_path, {"x-max-length": 10, "x-overflow": "reject-publish"})
    results = [queue.enqueue([("ex", "rk", PERSISTENT, b)])[0] for b in body_list(12)]
    assert results == [True] * 10 + [False] * 2


def test_purge_drops_paged_messages_and_their_log(tmp_path: Path) -> None:
    queue = make(tmp_path)
    publish(queue, body_list(50))
    held = queue.take()
    assert held is not None
    assert queue.purge() == 49
    assert queue.paged == 0 and queue.loaded == 0 and queue.message_count == 0
    queue.requeue([held])
    queue.close()
    again = make(tmp_path)
    assert [m.body for m in drain(again)] == [body_list(1)[0]]


def test_recovery_pages_too_and_marks_delivered_ones_redelivered(tmp_path: Path) -> None:
    queue = make(tmp_path)
    bodies = body_list(40)
    publish(queue, bodies)
    taken = [queue.take() for _ in range(8)]
    queue.ack([m for m in taken[:3] if m is not None])
    queue.sync_now()
    queue.close()  # a crash after that: 5 delivered and not acked

    again = make(tmp_path)
    assert again.message_count == 37
    assert again.paged == 37 - WINDOW.messages
    got = drain(again)
    assert [m.body for m in got] == bodies[3:]
    assert [m.redelivered for m in got] == [True] * 5 + [False] * 32


def test_recovery_of_paged_runs_keeps_the_redelivered_mark(tmp_path: Path) -> None:
    window = MemoryWindow(messages=2, bytes=1 << 20, refill=1)
    queue = make(tmp_path, window=window)
    publish(queue, body_list(10))
    for _ in range(6):
        assert queue.take() is not None  # delivered; the crash comes before any ack
    queue.close()
    again = make(tmp_path, window=window)
    got = drain(again)
    assert [m.redelivered for m in got] == [True] * 6 + [False] * 4


def test_a_deep_queue_holds_a_bounded_number_of_bodies(tmp_path: Path) -> None:
    queue = make(tmp_path, segment_bytes=1 << 20)
    body = b"x" * 1024
    for _ in range(20):
        assert all(queue.enqueue([("ex", "rk", PERSISTENT, body)] * 1000))
    assert queue.message_count == 20_000
    assert queue.loaded == WINDOW.messages
    assert queue.loaded_bytes == WINDOW.messages * 1024
    assert queue.ready_bytes == 20_000 * 1024
    count = 0
    while (msg := queue.take()) is not None:
        assert msg.body == body
        queue.ack([msg])
        count += 1
    assert count == 20_000


def test_a_deferred_delivered_mark_reaches_the_log_on_flush(tmp_path: Path) -> None:
    queue = make(tmp_path)
    publish(queue, body_list(10))
    taken = [queue.take(defer_mark=True) for _ in range(3)]
    assert all(m is not None for m in taken)
    crashed = QueueLog(tmp_path)
    list(crashed.scan())
    assert crashed.delivered == 0  # noted, not written: nothing may be sent yet
    queue.flush_delivered()
    queue.close()
    again = make(tmp_path)
    got = drain(again)
    assert [m.redelivered for m in got] == [True] * 3 + [False] * 7


def test_a_per_message_expiration_after_plain_messages_still_expires(tmp_path: Path) -> None:
    queue = make(tmp_path, window=MemoryWindow(messages=100, bytes=1 << 20, refill=3))
    publish(queue, [b"plain"])
    assert queue.take() is not None  # the queue went empty once
    publish(queue, [b"soon"], props(expiration="10"))
    publish(queue, [b"after"])
    expiry = queue.next_expiry()
    assert expiry is not None
    dead: list[str] = []
    queue.dead_letter = lambda q, msgs, reason: dead.extend(m.body.decode() for m in msgs)
    queue.expire(expiry + 1)
    assert dead == ["soon"]
    msg = queue.take()
    assert msg is not None and msg.body == b"after"
    # a requeued message with an expiration is still expired after the queue was empty
    publish(queue, [b"short"], props(expiration="10"))
    short = queue.take()
    assert short is not None and queue.message_count == 0
    queue.requeue([short])
    expiry = queue.next_expiry()
    assert expiry is not None
    queue.expire(expiry + 1)
    assert dead == ["soon", "short"]


def test_one_budget_for_the_bodies_of_all_queues_shared_fairly(tmp_path: Path) -> None:
    """100 deep queues share one 64 KiB budget: together they never hold more than it (plus
    one message), none more than its share (plus one), and each drains in order from disk;
    a deleted queue gives its bytes and its share back."""
    budget = MemoryBudget(64 * 1024)
    window = MemoryWindow(messages=2048, bytes=budget.total, refill=8)
    queues = [make(tmp_path / f"q{i}", window=window, budget=budget) for i in range(100)]
    assert budget.queues == 100 and budget.share == 64 * 1024 // 100
    body = 1000
    sent = [[b"%d-%d-" % (n, i) + b"x" * body for i in range(30)] for n in range(100)]
    for i in range(30):  # round robin, as many publishers would
        for n, q in enumerate(queues):
            publish(q, [sent[n][i]])
            assert budget.used <= budget.total + 2 * body
    assert budget.used == sum(q.loaded_bytes for q in queues)
    assert max(q.loaded_bytes for q in queues) <= budget.share + 2 * body
    assert sum(q.paged for q in queues) > 2500  # most of the 3,000 bodies are on disk only
    for n, q in enumerate(queues[:50]):
        assert [m.body for m in drain(q)] == sent[n]
        assert budget.used <= budget.total + 2 * body
    for q in queues[50:]:
        q.release_memory()
        q.release_memory()  # (idempotent)
    assert budget.queues == 50 and budget.share == 64 * 1024 // 50
    assert budget.used == sum(q.loaded_bytes for q in queues[:50]) == 0
