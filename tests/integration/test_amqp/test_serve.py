"""The connection handler end to end: a real server process, real pika and aio-pika clients."""

from __future__ import annotations

import signal
import socket
import urllib.request
from pathlib import Path

import aio_pika
import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import consume_expected


def _params(srv: ServerProcess, **kw: object) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(host=srv.host, port=srv.amqp_port, connection_attempts=1, **kw)


def _declare_stream(ch: pika.adapters.blocking_connection.BlockingChannel, name: str) -> None:
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})


def test_ready_line_names_real_ports_and_admin_answers(server: ServerProcess) -> None:
    assert server.amqp_port != 0 and server.admin_port != 0
    with urllib.request.urlopen(f"http://{server.host}:{server.admin_port}/healthz") as resp:
        assert resp.status == 200
    with urllib.request.urlopen(f"http://{server.host}:{server.admin_port}/readyz") as resp:
        assert resp.status == 200


def test_confirmed_publish_then_consume_from_first_with_offsets(server: ServerProcess) -> None:
    conn = pika.BlockingConnection(_params(server))
    ch = conn.channel()
    _declare_stream(ch, "s-basic")
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish(
            "",
            "s-basic",
            f"m{i}".encode(),
            pika.BasicProperties(headers={"n": i, "tags": ["a", "b"]}, content_type="text/plain"),
            mandatory=True,
        )
    ch.basic_qos(prefetch_count=4)
    got: list[tuple[bytes, int, object, str | None]] = []
    for method, props, body in ch.consume(
        "s-basic", arguments={"x-stream-offset": "first"}, inactivity_timeout=5
    ):
        assert method is not None, "timed out waiting for deliveries"
        got.append(
            (body, props.headers["x-stream-offset"], props.headers["tags"], props.content_type)
        )
        ch.basic_ack(method.delivery_tag)
        if len(got) == 10:
            break
    ch.cancel()
    conn.close()
    assert [g[0] for g in got] == [f"m{i}".encode() for i in range(10)]
    assert [g[1] for g in got] == list(range(10))
    assert all(g[2] == ["a", "b"] and g[3] == "text/plain" for g in got)


def test_prefetch_limits_unacked_deliveries(server: ServerProcess) -> None:
    conn = pika.BlockingConnection(_params(server))
    ch = conn.channel()
    _declare_stream(ch, "s-credit")
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("", "s-credit", str(i).encode())
    ch.basic_qos(prefetch_count=5)
    seen: list[int] = []
    ch.basic_consume(
        "s-credit",
        lambda c, m, p, b: seen.append(m.delivery_tag),
        arguments={"x-stream-offset": "first"},
    )
    conn.process_data_events(time_limit=1.0)
    assert len(seen) == 5  # no ack yet: exactly prefetch
    ch.basic_ack(seen[-1], multiple=True)
    conn.process_data_events(time_limit=1.0)
    assert len(seen) == 10
    conn.close()


def test_filtered_consumer_gets_only_matching_messages(server: ServerProcess) -> None:
    conn = pika.BlockingConnection(_params(server))
    ch = conn.channel()
    _declare_stream(ch, "s-filter")
    ch.confirm_delivery()
    for i in range(30):
        region = ["emea", "apac", "amer"][i % 3]
        ch.basic_publish(
            "", "s-filter", f"{region}-{i}".encode(),
            pika.BasicProperties(headers={"x-stream-filter-value": region}),
        )  # fmt: skip
    ch.basic_qos(prefetch_count=50)
    want = [f"apac-{i}".encode() for i in range(1, 30, 3)]
    arguments = {"x-stream-offset": "first", "x-stream-filter": "apac"}
    got = consume_expected(ch, "s-filter", len(want), arguments, quiet_s=1.0)
    conn.close()
    assert [body for _m, _p, body in got] == want


def test_mandatory_unroutable_is_returned_with_312(server: ServerProcess) -> None:
    conn = pika.BlockingConnection(_params(server))
    ch = conn.channel()
    returned: list[tuple[int, str]] = []
    ch.add_on_return_callback(lambda c, m, p, b: returned.append((m.reply_code, m.reply_text)))
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("amq.direct", "nowhere", b"x", mandatory=True)
    conn.process_data_events(time_limit=0.2)
    assert returned == [(312, "NO_ROUTE")]
    conn.close()


def test_consume_without_prefetch_closes_channel_406(server: ServerProcess) -> None:
    conn = pika.BlockingConnection(_params(server))
    ch = conn.channel()
    _declare_stream(ch, "s-errors")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume("s-errors", lambda *a: None)
    assert info.value.reply_code == 406
    assert "consumer prefetch count is not set" in info.value.reply_text
    assert conn.is_open  # a channel error leaves the connection up
    ch2 = conn.channel()
    ch2.basic_qos(prefetch_count=1)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch2.basic_consume("s-errors", lambda *a: None, arguments={"x-stream-offset": "bogus"})
    assert info.value.reply_code == 406
    assert "x-stream-offset" in info.value.reply_text
    conn.close()


@pytest.mark.parametrize("operation", ["get", "purge"])
def test_get_and_purge_close_connection_540(server: ServerProcess, operation: str) -> None:
    conn = pika.BlockingConnection(_params(server))
    ch = conn.channel()
    _declare_stream(ch, "s-errors")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        if operation == "get":
            ch.basic_get("s-errors")
        else:
            ch.queue_purge("s-errors")
    assert info.value.reply_code == 540


def test_bad_login_is_refused_with_403(server: ServerProcess) -> None:
    creds = pika.PlainCredentials("guest", "wrong")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(_params(server, credentials=creds))
    assert "(403) 'ACCESS_REFUSED - Login was refused" in str(info.value)


def test_protocol_header_mismatch_gets_our_header_back(server: ServerProcess) -> None:
    with socket.create_connection((server.host, server.amqp_port), timeout=5) as sock:
        sock.sendall(b"AMQP\x00\x00\x08\x00")
        assert sock.recv(64) == b"AMQP\x00\x00\x09\x01"
        assert sock.recv(64) == b""  # then the server closes


def test_malformed_frame_closes_only_that_connection_with_501(server: ServerProcess) -> None:
    good = pika.BlockingConnection(_params(server))
    with socket.create_connection((server.host, server.amqp_port), timeout=5) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        sock.recv(4096)  # connection.start
        sock.sendall(b"\x01\x00\x00\x00\x00\x00\x04abcd\x00")  # frame end octet is wrong
        data = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        # connection.close (10, 50) with reply code 501, then the socket closes
        assert data[7:11] == b"\x00\x0a\x00\x32"
        assert int.from_bytes(data[11:13], "big") == 501
    ch = good.channel()
    _declare_stream(ch, "s-still-alive")
    good.close()


async def test_aio_pika_publish_with_confirms_and_consume(server: ServerProcess) -> None:
    url = f"amqp://guest:guest@{server.host}:{server.amqp_port}/"
    conn = await aio_pika.connect(url)
    async with conn:
        ch = await conn.channel(publisher_confirms=True)
        await ch.set_qos(prefetch_count=100)
        queue = await ch.declare_queue("s-aio", durable=True, arguments={"x-queue-type": "stream"})
        for i in range(50):
            await ch.default_exchange.publish(aio_pika.Message(f"a{i}".encode()), "s-aio")
        offsets: list[int] = []
        async with queue.iterator(arguments={"x-stream-offset": 10}) as it:
            async for message in it:
                await message.ack()
                offsets.append(int(message.headers["x-stream-offset"]))  # type: ignore[arg-type]
                if len(offsets) == 40:
                    break
        assert offsets == list(range(10, 50))


def test_sigterm_closes_clients_with_320_and_exits_0(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data").start()
    conn = pika.BlockingConnection(_params(srv))
    ch = conn.channel()
    _declare_stream(ch, "s-term")
    ch.confirm_delivery()
    ch.basic_publish("", "s-term", b"kept")
    srv.proc.send_signal(signal.SIGTERM)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=5)
    assert info.value.reply_code == 320
    assert srv.proc.wait(15) == 0
    # the confirmed message is on disk: a restarted server delivers it
    again = srv.restart()
    try:
        conn = pika.BlockingConnection(_params(again))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1)
        for method, _p, body in ch.consume(
            "s-term", arguments={"x-stream-offset": "first"}, inactivity_timeout=5
        ):
            assert method is not None
            assert body == b"kept"
            break
        conn.close()
    finally:
        assert again.stop() == 0


def test_queue_delete_cancels_consumers_with_basic_cancel(server: ServerProcess) -> None:
    conn = pika.BlockingConnection(_params(server))
    ch = conn.channel()
    _declare_stream(ch, "s-deleted")
    cancelled: list[str] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    ch.basic_qos(prefetch_count=10)
    tag = ch.basic_consume("s-deleted", lambda *a: None)
    other = conn.channel()
    other.queue_delete("s-deleted")
    conn.process_data_events(time_limit=0.5)
    assert cancelled == [tag]
    assert ch.is_open
    conn.close()
