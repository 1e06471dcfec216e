"""kill -9 the server at random moments while a durable classic queue is busy.

A publisher (confirms, persistent 32 KiB messages: the 8 MiB segments roll every 256) and a
consumer (basic.get, then ack, or nack with requeue, or hold) run while the server is killed
at a random moment: between an append and its confirm, between a delivery and its ack, in the
middle of an ack, a segment deletion or a requeue. After each restart the queue is drained:
every confirmed message that was not acked is there exactly once, in publish order;
no surely acked message comes back; every message a client received before the crash comes
back with redelivered=true. The memory window is 16 messages, so most of the recovered queue
is read back from its segments.

"Surely acked": an ack followed by a completed round trip on the same channel (the server
handles a channel's methods in order, so it had processed the ack).

Also here: a queue deleted just before a crash (its files still there) is not resurrected by
a declare of the same name.
"""

from __future__ import annotations

import random
import shutil
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(300)

QUEUE = "crashy"
BODY_PAD = b"x" * (32 * 1024 - 8)
ROUNDS = 4


@dataclass
class Ledger:
    """What the clients saw during one round (ids are unique across rounds)."""

    attempted: set[int] = field(default_factory=set)
    confirmed: set[int] = field(default_factory=set)
    received: set[int] = field(default_factory=set)
    acked: set[int] = field(default_factory=set)  # an ack was sent (it may not have arrived)
    surely_acked: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def publisher(url: str, first: int, ledger: Ledger, stop: threading.Event) -> None:
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        i = first
        while not stop.is_set():
            with ledger.lock:
                ledger.attempted.add(i)
            ch.basic_publish("", QUEUE, struct.pack(">Q", i) + BODY_PAD, props)
            with ledger.lock:
                ledger.confirmed.add(i)
            i += 1
    except Exception:  # the server was killed under it
        return


def consumer(url: str, ledger: Ledger, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    pending_ack: list[int] = []  # acked, not yet followed by a round trip
    held: list[tuple[int, int]] = []  # (delivery tag, id) taken and not settled yet
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        while not stop.is_set():
            method, _props, body = ch.basic_get(QUEUE)
            with ledger.lock:  # the get round trip completed: earlier acks were processed
                ledger.surely_acked.update(pending_ack)
            pending_ack.clear()
            if method is None:
                time.sleep(0.01)
                continue
            msg_id = struct.unpack_from(">Q", body)[0]
            with ledger.lock:
                ledger.received.add(msg_id)
            roll = rng.random()
            if roll < 0.7:
                with ledger.lock:
                    ledger.acked.add(msg_id)
                ch.basic_ack(method.delivery_tag)
                pending_ack.append(msg_id)
            elif roll < 0.85:
                ch.basic_nack(method.delivery_tag, requeue=True)
            else:
                held.append((method.delivery_tag, msg_id))
            if len(held) > 5:
                tag, held_id = held.pop(0)
                with ledger.lock:
                    ledger.acked.add(held_id)
                ch.basic_ack(tag)
                pending_ack.append(held_id)
    except Exception:
        return


def drain(server: ServerProcess) -> list[tuple[int, bool]]:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(QUEUE, durable=True)
    out = []
    while True:
        method, _props, body = ch.basic_get(QUEUE)
        if method is None:
            break
        out.append((struct.unpack_from(">Q", body)[0], bool(method.redelivered)))
        ch.basic_ack(method.delivery_tag)
    ch.queue_declare(QUEUE, passive=True)  # the acks were processed
    conn.close()
    return out


@pytest.mark.parametrize("fsync", ["batch", "always"])
def test_random_kills_keep_confirmed_drop_acked_and_flag_redeliveries(
    tmp_path: Path, fsync: str
) -> None:
    rng = random.Random(f"crash-windows-{fsync}")
    server = ServerProcess(
        tmp_path / "data", extra_args=("--fsync", fsync, "--queue-memory-messages", "16")
    )
    server.start()
    try:
        conn = connect(server)
        conn.channel().queue_declare(QUEUE, durable=True)
        conn.close()
        next_id = 0
        for round_no in range(ROUNDS):
            ledger = Ledger()
            stop = threading.Event()
            threads = [
                threading.Thread(target=publisher, args=(server.url, next_id, ledger, stop)),
                threading.Thread(target=consumer, args=(server.url, ledger, stop, round_no)),
            ]
            for t in threads:
                t.start()
            # the kill comes at a random point once traffic flows (on a slow machine the
            # clients may need more than the shortest pause just to connect)
            deadline = time.monotonic() + 30
            while not ledger.confirmed and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.5, 2.0))
            server.kill()
            stop.set()
            for t in threads:
                t.join(30)
                assert not t.is_alive()
            assert ledger.confirmed, "nothing was confirmed before the kill"

            server.start()
            got = drain(server)
            ids = [i for i, _ in got]
            assert len(ids) == len(set(ids)), "a message came back twice"
            assert ids == sorted(ids), "recovered out of publish order"
            assert set(ids) <= ledger.attempted
            lost = ledger.confirmed - ledger.acked - set(ids)
            assert not lost, f"confirmed messages lost in round {round_no}: {sorted(lost)[:10]}"
            back = ledger.surely_acked & set(ids)
            assert not back, f"acked messages came back: {sorted(back)[:10]}"
            unflagged = [i for i, redelivered in got if i in ledger.received and not redelivered]
            assert not unflagged, f"delivered before the crash, not redelivered: {unflagged[:10]}"
            next_id = max(ledger.attempted) + 1
    finally:
        if server.running:
            server.stop()


def test_deleted_queue_files_left_by_a_crash_are_not_resurrected(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        conn = connect(server)
        ch = conn.channel()
        ch.queue_declare("gone", durable=True)
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish("", "gone", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
        directories = [p for p in (server.data_dir / "queues").rglob("*") if p.is_dir()]
        saved = tmp_path / "saved"
        queue_dir = next(p for p in directories if any(p.glob("*.qseg")))
        shutil.copytree(queue_dir, saved)
        ch.queue_delete("gone")
        conn.close()
        server.kill()
        shutil.copytree(saved, queue_dir, dirs_exist_ok=True)  # the unlinks had not happened

        server.start()
        conn = connect(server)
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("gone", passive=True)
        assert info.value.reply_code == 404
        ch = conn.channel()
        assert ch.queue_declare("gone", durable=True).method.message_count == 0
        assert ch.basic_get("gone")[0] is None
        conn.close()
    finally:
        if server.running:
            server.stop()
