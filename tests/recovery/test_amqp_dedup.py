"""Deduplicated AMQP publishing into a stream (x-sievemq-publisher / x-sievemq-publishing-id):
a repeated id is confirmed but not stored, also after the server was SIGKILLed, and a
malformed pair closes the channel with 406 naming the header."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from sievemq.storage.layout import stream_directory
from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect


def _channel(server: ServerProcess) -> tuple[Any, Any]:
    conn = connect(server)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("out", durable=True, arguments={"x-queue-type": "stream"})
    return conn, ch


def _publish(ch: Any, body: str, reference: str, pid: Any) -> None:
    headers = {"x-sievemq-publisher": reference, "x-sievemq-publishing-id": pid}
    ch.basic_publish("", "out", body.encode(), pika.BasicProperties(headers=headers))


def _bodies(server: ServerProcess) -> list[bytes]:
    conn = connect(server)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=100)
    got: list[bytes] = []
    tag = ch.basic_consume(
        "out", lambda c, m, p, b: got.append(b), arguments={"x-stream-offset": "first"}
    )
    conn.process_data_events(time_limit=1.0)
    ch.basic_cancel(tag)
    conn.close()
    return got


def test_repeated_ids_are_confirmed_not_stored_also_after_sigkill(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        conn, ch = _channel(server)
        for i in range(5):
            _publish(ch, f"a{i}", "job-1", i)
        for i in range(3):  # a replay: every publish is confirmed (no exception) ...
            _publish(ch, f"a{i} again", "job-1", i)
        _publish(ch, "b0", "job-2", 0)  # another reference has its own sequence
        ch.basic_publish("", "out", b"plain")  # no headers: never deduplicated
        ch.basic_publish("", "out", b"plain")
        conn.close()
        expected = [b"a0", b"a1", b"a2", b"a3", b"a4", b"b0", b"plain", b"plain"]
        assert _bodies(server) == expected  # ... and nothing of the replay is stored

        server.kill()  # the sequences are rebuilt from the stored headers
        server.restart()
        conn, ch = _channel(server)
        _publish(ch, "a4 again", "job-1", 4)
        _publish(ch, "a5", "job-1", 5)
        _publish(ch, "b0 again", "job-2", 0)
        conn.close()
        assert _bodies(server) == [*expected, b"a5"]

        server.stop()  # a clean stop snapshots the sequences: the next start reads no records
        assert (stream_directory(server.data_dir, "/", "out") / "publishers.snap").exists()
        server.restart()
        conn, ch = _channel(server)
        _publish(ch, "a5 again", "job-1", 5)
        conn.close()
        assert _bodies(server) == [*expected, b"a5"]
    finally:
        if server.running:
            server.stop()


@pytest.mark.parametrize(
    ("headers", "text"),
    [
        ({"x-sievemq-publisher": "r"}, "invalid x-sievemq-publishing-id: missing"),
        ({"x-sievemq-publishing-id": 3}, "invalid x-sievemq-publisher: missing"),
        (
            {"x-sievemq-publisher": "r", "x-sievemq-publishing-id": "7"},
            "invalid x-sievemq-publishing-id: expected an integer",
        ),
        (
            {"x-sievemq-publisher": "r", "x-sievemq-publishing-id": -1},
            "invalid x-sievemq-publishing-id: -1 is out of range",
        ),
        (
            {"x-sievemq-publisher": "", "x-sievemq-publishing-id": 1},
            "invalid x-sievemq-publisher: 0 bytes",
        ),
    ],
)
def test_malformed_dedup_headers_close_the_channel_naming_them(
    tmp_path: Path, headers: dict[str, Any], text: str
) -> None:
    with ServerProcess(tmp_path / "data") as server:
        conn, ch = _channel(server)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_publish("", "out", b"x", pika.BasicProperties(headers=headers))
        assert info.value.reply_code == 406 and text in info.value.reply_text
        conn.close()
        assert _bodies(server) == []
