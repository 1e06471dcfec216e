"""A quorum queue's replica copy: the leader's log changes applied to a ``Copy``, a catch-up
from a ``Snapshot``, and the gated ``ClassicQueue`` and appender on the leader."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sievemq.cluster.quorum_replication import (
    Copy,
    Shipper,
    encode_ack,
    encode_counts,
    encode_delivered,
    encode_keep,
    encode_purge,
    encode_records,
)
from sievemq.gateway.model.classic.arguments import QueueArguments
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.runtime.classic.appender import ClassicAppender
from sievemq.storage import Durability, Message
from sievemq.storage.queue_log import QueueLog, Snapshot

PERSISTENT = b"\x10\x00\x02"  # properties: delivery-mode 2
TRANSIENT = b"\x00\x00"


class Recorder:
    """A log observer that encodes each change as the leader's shipper does."""

    def __init__(self) -> None:
        self.ops: list[bytes] = []

    def records_written(self, records: list[bytes]) -> None:
        self.ops.append(encode_records(records))

    def acked(self, ids: list[int]) -> None:
        self.ops.append(encode_ack(ids))

    def delivered(self, msg_id: int) -> None:
        self.ops.append(encode_delivered(msg_id))

    def purged(self, floor: int) -> None:
        self.ops.append(encode_purge(floor))


def live(directory: Path) -> dict[int, bytes]:
    found = QueueLog(directory)
    try:
        return {m.id: m.body for m in found.recover()}
    finally:
        found.close()


def leader_log(directory: Path) -> tuple[QueueLog, Recorder]:
    qlog = QueueLog(directory, segment_bytes=400)  # small segments: several, some deleted
    list(qlog.scan())
    recorder = Recorder()
    qlog.observer = recorder
    return qlog, recorder


def put(qlog: QueueLog, bodies: list[bytes]) -> None:
    for body in bodies:
        msg_id = qlog.next_id()
        qlog.stage(msg_id, 1000 + msg_id, "", "q", PERSISTENT, body)
    qlog.write_staged()


def test_the_changes_applied_in_order_give_the_leader_s_live_messages(tmp_path: Path) -> None:
    qlog, recorder = leader_log(tmp_path / "leader")
    put(qlog, [f"m{i}".encode() for i in range(30)])
    qlog.mark_delivered(12)
    qlog.ack(list(range(1, 11)))
    put(qlog, [b"late"])
    copy = Copy(tmp_path / "copy")
    for batch in recorder.ops:
        copy.apply_ops(batch)
    for batch in recorder.ops:  # everything again: applied once
        copy.apply_ops(batch)
    copy.close()
    qlog.close()
    assert live(tmp_path / "copy") == live(tmp_path / "leader")
    assert len(live(tmp_path / "copy")) == 21
    check = QueueLog(tmp_path / "copy")
    list(check.scan())
    assert check.delivered == 12  # the leader's delivered mark
    check.close()

    qlog, recorder = leader_log(tmp_path / "leader")
    qlog.purge()
    put(qlog, [b"after"])
    copy = Copy(tmp_path / "copy")
    for batch in recorder.ops:
        copy.apply_ops(batch)
    copy.close()
    qlog.close()
    assert live(tmp_path / "copy") == live(tmp_path / "leader")
    assert list(live(tmp_path / "copy").values()) == [b"after"]


def test_a_copy_stores_the_leader_s_records_byte_for_byte(tmp_path: Path) -> None:
    qlog = QueueLog(tmp_path / "leader")
    list(qlog.scan())
    recorder = Recorder()
    qlog.observer = recorder
    put(qlog, [f"first{i}".encode() * (i + 1) for i in range(50)])
    put(qlog, [f"second{i}".encode() for i in range(300)])
    copy = Copy(tmp_path / "copy")
    for batch in recorder.ops:  # each a run of ``E`` operations
        copy.apply_ops(batch)
    copy.close()
    qlog.close()
    segments = sorted(p.name for p in (tmp_path / "leader").glob("*.qseg"))
    assert segments == sorted(p.name for p in (tmp_path / "copy").glob("*.qseg"))
    for name in segments:
        assert (tmp_path / "copy" / name).read_bytes() == (tmp_path / "leader" / name).read_bytes()
    assert copy.next_id == 351
    assert len(live(tmp_path / "copy")) == 350


def test_a_damaged_record_stops_its_batch_after_the_records_before_it(tmp_path: Path) -> None:
    qlog, recorder = leader_log(tmp_path / "leader")
    put(qlog, [b"one", b"two", b"three"])
    qlog.close()
    batch = bytearray(recorder.ops[0])
    batch[batch.index(b"two")] ^= 0xFF  # its checksum no longer holds
    copy = Copy(tmp_path / "copy")
    with pytest.raises(ValueError, match="damaged record"):
        copy.apply_ops(bytes(batch))
    assert copy.next_id == 2  # "one" is written, nothing past the damage
    copy.close()
    assert list(live(tmp_path / "copy").values()) == [b"one"]


def test_a_copy_catches_up_from_a_snapshot(tmp_path: Path) -> None:
    qlog, recorder = leader_log(tmp_path / "leader")
    put(qlog, [f"m{i}".encode() for i in range(20)])
    copy = Copy(tmp_path / "copy")
    for batch in recorder.ops:
        copy.apply_ops(batch)
    held = copy.next_id - 1
    # the copy is away: settlements of ids it holds, of ids it never got, new records
    put(qlog, [f"n{i}".encode() for i in range(20)])
    qlog.ack([*range(3, 15), *range(22, 30)])
    snapshot = Snapshot(qlog.directory, held, qlog.last_id)
    snapshot.open()
    runs: list[tuple[int, int]] = []
    records: list[bytes] = []
    for first in snapshot.firsts:
        kept, found = snapshot.segment(first)
        runs += kept
        records += found
    copy.apply_ops(encode_records(records) + encode_keep(held, runs))
    copy.close()
    qlog.close()
    assert live(tmp_path / "copy") == live(tmp_path / "leader")
    assert len(live(tmp_path / "copy")) == 40 - 12 - 8


def quorum_queue(directory: Path) -> ClassicQueue:
    qlog = QueueLog(directory)
    list(qlog.scan())
    return ClassicQueue("q", "/", QueueArguments(kind="quorum"), durable=True, log_store=qlog)


def test_a_gated_queue_delivers_only_committed_messages(tmp_path: Path) -> None:
    queue = quorum_queue(tmp_path / "q")
    queue.gate()
    assert queue.enqueue([("", "q", PERSISTENT, b"one"), ("", "q", PERSISTENT, b"two")]) == [
        True,
        True,
    ]
    assert queue.take() is None  # nobody else holds them yet
    queue.commit(2)  # id 1 held by a majority
    first = queue.take()
    assert first is not None and first.body == b"one"
    assert queue.take() is None
    queue.commit(3)
    second = queue.take()
    assert second is not None and second.body == b"two"
    # a transient message is not logged: at the head it goes at once
    queue.enqueue([("", "q", TRANSIENT, b"t")])
    third = queue.take()
    assert third is not None and third.body == b"t"
    queue.ungate()
    queue.enqueue([("", "q", PERSISTENT, b"free")])
    fourth = queue.take()
    assert fourth is not None and fourth.body == b"free"


def test_a_gated_queue_restarted_delivers_only_what_it_had_committed(tmp_path: Path) -> None:
    """A quorum queue's leader that restarts on its log: the messages a majority was not
    known to hold are not delivered until the replicas acknowledge them again."""
    queue = quorum_queue(tmp_path / "q")
    queue.gate()
    queue.enqueue([("", "q", PERSISTENT, b) for b in (b"one", b"two", b"three")])
    queue.commit(2)  # only id 1 held by a majority
    queue.close()
    again = quorum_queue(tmp_path / "q")
    assert again.log is not None
    again.restore(again.log.scan(), again.log.delivered)
    again.gate()
    first = again.take()
    assert first is not None and first.body == b"one"
    assert again.take() is None
    again.commit(4)
    assert [m.body for m in (again.take(), again.take()) if m is not None] == [b"two", b"three"]
    again.ungate()  # no replica any more: a later start counts everything committed
    again.close()
    third = quorum_queue(tmp_path / "q")
    assert third.log is not None
    third.gate()
    assert third.commit_end == 4


class Sink:
    def __init__(self) -> None:
        self.settled: list[tuple[list[int], bool]] = []

    def settle_confirms(self, seqs: list[int], ok: bool) -> None:
        self.settled.append((seqs, ok))


async def test_the_appender_holds_confirms_until_committed(tmp_path: Path) -> None:
    queue = quorum_queue(tmp_path / "q")
    queue.gate()
    appender = ClassicAppender(queue, asyncio.get_running_loop(), Durability.NEVER, 200)
    sink = Sink()
    message = Message((), "", "q", PERSISTENT, b"x", 0)
    appender.submit(message, sink, 1)
    appender.flush()
    appender.submit(message, sink, 2)
    appender.flush()
    assert sink.settled == []
    queue.commit(2)
    assert sink.settled == [([1], True)]
    queue.commit(3)
    assert sink.settled == [([1], True), ([2], True)]
    appender.submit(message, sink, 3)
    appender.flush()
    appender.close()  # deleted before a majority held it: nacked
    assert sink.settled[-1] == ([3], False)


class Collected:
    """A feed that keeps what the shipper sends it."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.arrived = asyncio.Event()

    def send(self, data: bytes, through: int) -> None:
        self.sent.append(data)
        self.arrived.set()


async def test_changes_the_log_makes_in_a_worker_thread_are_shipped(tmp_path: Path) -> None:
    """The appender fdatasyncs in a worker thread, and ``QueueLog.sync`` writes the delivery
    counts noted since: the shipper is told from that thread, and still ships that change
    and every later one (it used to stop shipping for good)."""
    queue = quorum_queue(tmp_path / "q")
    assert queue.log is not None
    qlog = queue.log
    shipper = Shipper(queue, qlog)
    feed = Collected()
    shipper.feeds.add(feed)  # type: ignore[arg-type]
    queue.enqueue([("", "q", PERSISTENT, b"one")])
    await asyncio.wait_for(feed.arrived.wait(), 5)
    feed.arrived.clear()
    qlog.note_counts([(1, 1, False)])  # a message given back
    await asyncio.to_thread(qlog.sync)
    await asyncio.wait_for(feed.arrived.wait(), 5)
    assert feed.sent[-1] == encode_counts([(1, 1, False)])
    feed.arrived.clear()
    queue.enqueue([("", "q", PERSISTENT, b"two")])
    await asyncio.wait_for(feed.arrived.wait(), 5)
    assert feed.sent[-1].startswith(b"E")
    qlog.close()
