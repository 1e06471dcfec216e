"""The Spark sink's confirm-mode publisher (sievemq.spark.publisher) against a real server:
what it stores (bodies split over frames, headers, dedup ids), confirms with a small window,
and the broker's refusals it reports (unroutable, missing exchange, bad login)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sievemq.spark.publisher import ConfirmPublisher
from sievemq.spark.sink import SinkOptions, publish_rows
from sievemq.storage.layout import stream_directory
from sievemq.storage.reader import disk_end
from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("publisher") / "data").start()
    yield proc
    assert proc.running, proc.stderr()
    proc.stop()


def _consume(server: ServerProcess, stream: str, n: int) -> list[tuple[Any, bytes]]:
    conn = connect(server)
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        got: list[tuple[Any, bytes]] = []
        for method, props, body in ch.consume(
            stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=10
        ):
            assert method is not None, f"only {len(got)} of {n} messages arrived"
            got.append((props, body))
            ch.basic_ack(method.delivery_tag)
            if len(got) == n:
                break
        ch.cancel()
        return got
    finally:
        conn.close()


def test_rows_are_stored_with_their_headers_and_a_replay_stores_nothing(
    server: ServerProcess,
) -> None:
    big = bytes(range(256)) * 1200  # 307 KB: three body frames at frame_max 131072
    rows: list[tuple[bytes, str, tuple[str, ...], tuple[tuple[str, str], ...]]] = [
        (f"m{i}".encode(), "s", ("eu", "paid") if i % 3 == 0 else ("eu",), (("i", str(i)),))
        for i in range(2999)
    ]
    rows.insert(1000, (big, "s", (), ()))
    options = SinkOptions(server.url, "s")
    base = 7 << 32
    assert publish_rows(options, rows, "spark:q:0", base) == 3000
    got = _consume(server, "s", 3000)
    assert [body for _, body in got] == [r[0] for r in rows]
    props = [p for p, _ in got]
    assert props[0].headers["x-stream-filter-value"] == ["eu", "paid"]
    assert props[1].headers["x-stream-filter-value"] == "eu"
    assert props[1].headers["i"] == "1" and props[1].delivery_mode == 2
    assert "x-stream-filter-value" not in props[1000].headers
    assert props[1000].headers["x-sievemq-publisher"] == "spark:q:0"
    assert [p.headers["x-sievemq-publishing-id"] for p in props] == [base + i for i in range(3000)]
    assert props[5].message_id == f"spark:q:0:{base + 5}"

    # the same rows again under the same ids (a replayed batch): all confirmed, none stored
    assert publish_rows(options, rows, "spark:q:0", base) == 3000
    assert disk_end(stream_directory(server.data_dir, "/", "s")) == 3000


def test_a_window_smaller_than_the_rows_waits_for_confirms(server: ServerProcess) -> None:
    with ConfirmPublisher(server.url, window=10) as publisher:
        publisher.ensure_stream("w")
        for pid in range(500):
            headers = b"\x00\x00\x00\x00"  # an empty table: no dedup
            publisher.publish("", "w", headers, f"id{pid}", b"x")
            assert publisher.outstanding <= 10
        publisher.wait()
        assert publisher.outstanding == 0 and publisher.published == 500
    assert disk_end(stream_directory(server.data_dir, "/", "w")) == 500


def test_unroutable_message_is_an_error(server: ServerProcess) -> None:
    conn = connect(server)
    conn.channel().exchange_declare("nowhere", "direct")
    conn.close()
    options = SinkOptions(server.url, "unused", exchange="nowhere")
    with pytest.raises(RuntimeError, match="returned as unroutable: 312 NO_ROUTE"):
        publish_rows(options, [(b"x", "k", (), ())], "spark:r:0", 0)


def test_missing_exchange_closes_the_channel_with_404(server: ServerProcess) -> None:
    options = SinkOptions(server.url, "unused", exchange="no-such-exchange")
    with pytest.raises(RuntimeError, match="broker closed the channel: 404 NOT_FOUND"):
        publish_rows(options, [(b"x", "k", (), ())], "spark:r:0", 0)


def test_bad_login_names_the_refusal(server: ServerProcess) -> None:
    url = server.url.replace("guest:guest", "guest:wrong")
    with pytest.raises(RuntimeError, match="403") as caught:
        publish_rows(SinkOptions(url, "s"), [(b"x", "s", (), ())], "spark:r:0", 0)
    assert "wrong" not in str(caught.value)  # the message shows the URI without its password


def test_a_new_stream_is_declared_as_a_stream(server: ServerProcess) -> None:
    assert publish_rows(SinkOptions(server.url, "fresh"), [(b"x", "fresh", (), ())], "r", 0) == 1
    conn = connect(server)
    try:
        ok = conn.channel().queue_declare("fresh", passive=True)
        assert ok.method.message_count == 1
    finally:
        conn.close()
    assert disk_end(stream_directory(server.data_dir, "/", "fresh")) == 1
