"""kill -9 the server with a durable classic queue holding acked, unacked and ready messages.

After the restart: every confirmed persistent message that was not acked is there, in
publish order; nothing acked comes back; transient messages are gone; the messages that had
been delivered before the crash come back with the redelivered flag, the others without it.
A second kill while consuming the recovered queue must not resurrect what was acked.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(120)

QUEUE = "kill-classic"


def kill(server: ServerProcess, conn: pika.BlockingConnection) -> None:
    """SIGKILL the server, then release the client's sockets (its close fails: peer gone)."""
    server.kill()
    with contextlib.suppress(pika.exceptions.AMQPError):
        conn.close()


def get_all(ch: pika.adapters.blocking_connection.BlockingChannel) -> list[tuple[bytes, bool]]:
    out = []
    while True:
        method, _props, body = ch.basic_get(QUEUE)
        if method is None:
            return out
        out.append((body, method.redelivered))
        ch.basic_ack(method.delivery_tag)


@pytest.mark.parametrize("fsync", ["batch", "always"])
def test_sigkill_keeps_confirmed_unacked_and_drops_acked(tmp_path: Path, fsync: str) -> None:
    server = ServerProcess(tmp_path / "data", extra_args=("--fsync", fsync)).start()
    try:
        conn = connect(server)
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=True)
        ch.confirm_delivery()
        persistent = pika.BasicProperties(delivery_mode=2)
        for i in range(100):
            ch.basic_publish("", QUEUE, f"p{i}".encode(), persistent)
        for i in range(10):
            ch.basic_publish("", QUEUE, f"t{i}".encode(), pika.BasicProperties(delivery_mode=1))
        # ack the first 30, take 5 more without acking them (delivered, then the crash)
        for _ in range(30):
            method, _, _ = ch.basic_get(QUEUE)
            ch.basic_ack(method.delivery_tag)
        held = [ch.basic_get(QUEUE)[2] for _ in range(5)]
        assert held == [f"p{i}".encode() for i in range(30, 35)]
        ch.queue_declare(QUEUE, passive=True)  # a round trip: the acks above were processed
        kill(server, conn)

        server.start()
        conn = connect(server)
        ch = conn.channel()
        ok = ch.queue_declare(QUEUE, durable=True).method
        assert ok.message_count == 70
        first = [ch.basic_get(QUEUE) for _ in range(10)]
        got = [(body, method.redelivered) for method, _, body in first]
        assert got == [(f"p{i}".encode(), i < 35) for i in range(30, 40)]
        for method, _, _ in first:
            ch.basic_ack(method.delivery_tag)
        ch.queue_declare(QUEUE, passive=True)
        kill(server, conn)

        server.start()
        conn = connect(server)
        ch = conn.channel()
        rest = get_all(ch)
        assert [body for body, _ in rest] == [f"p{i}".encode() for i in range(40, 100)]
        conn.close()
        data = server.data_dir / "queues"
        assert data.exists()
    finally:
        if server.running:
            server.stop()


def test_transient_queue_is_gone_after_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        conn = connect(server)
        ch = conn.channel()
        ch.queue_declare("transient-q", durable=False)
        ch.queue_declare("durable-q", durable=True)
        conn.close()
        server.kill()
        server.start()
        conn = connect(server)
        ch = conn.channel()
        ch.queue_declare("durable-q", passive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("transient-q", passive=True)
        assert info.value.reply_code == 404
        conn.close()
    finally:
        if server.running:
            server.stop()


def test_consumed_without_acks_or_with_a_multiple_ack_stays_gone(tmp_path: Path) -> None:
    """Deliveries are settled in groups (no-ack ones per dispatch turn, manual ones by one
    multiple ack): after kill -9 none of them comes back, and the 500 held ones (200 before
    the ack, 300 sent for the credit it gave back) come first, flagged."""
    server = ServerProcess(tmp_path / "data").start()
    try:
        conn = connect(server)
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=True)
        ch.queue_declare(QUEUE + "-manual", durable=True)
        ch.confirm_delivery()
        persistent = pika.BasicProperties(delivery_mode=2)
        for i in range(3000):  # past the memory window: most are read back from the log
            ch.basic_publish("", QUEUE, f"n{i}".encode(), persistent)
            ch.basic_publish("", QUEUE + "-manual", f"m{i}".encode(), persistent)
        got: list[bytes] = []
        ch.basic_consume(QUEUE, lambda c, m, p, b: got.append(b), auto_ack=True)
        while len(got) < 3000:
            conn.process_data_events(time_limit=1)
        assert got == [f"n{i}".encode() for i in range(3000)]
        ch.basic_qos(prefetch_count=500)
        manual: list[int] = []
        ch.basic_consume(QUEUE + "-manual", lambda c, m, p, b: manual.append(m.delivery_tag))
        while len(manual) < 500:
            conn.process_data_events(time_limit=1)
        ch.basic_ack(manual[299], multiple=True)  # 300 acked: 300 more come (credit)
        while len(manual) < 800:
            conn.process_data_events(time_limit=1)
        ch.queue_declare(QUEUE, passive=True)  # a round trip: the ack was processed
        kill(server, conn)

        server.start()
        conn = connect(server)
        ch = conn.channel()
        assert ch.queue_declare(QUEUE, durable=True, passive=True).method.message_count == 0
        back = []
        while True:
            method, _props, body = ch.basic_get(QUEUE + "-manual", auto_ack=True)
            if method is None:
                break
            back.append((body, method.redelivered))
        assert [b for b, _ in back] == [f"m{i}".encode() for i in range(300, 3000)]
        assert all(r for _, r in back[:500])  # delivered before the crash, not acked
        assert not any(r for _, r in back[500:])
        conn.close()
    finally:
        server.stop()
