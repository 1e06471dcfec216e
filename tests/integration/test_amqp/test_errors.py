"""Every error a client can provoke, with the exact reply code and text.

Reply texts follow RabbitMQ (docs/compatibility.md): ``NAME - explanation``.
Channel errors (403–406) close only the channel: each helper checks the connection still
works afterwards. Connection errors (5xx) close the connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pytest
from pamqp import commands

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.raw import PROTOCOL_HEADER, Closed, RawClient

pytestmark = pytest.mark.timeout(120)  # a hang guard, with room for a starved machine

STREAM = {"x-queue-type": "stream"}


def channel_error(server: ServerProcess, action: Callable[[Any], Any]) -> tuple[int, str]:
    """Run action on a fresh channel; it must close the channel (not the connection)."""
    conn = connect(server)
    try:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            action(ch)
        # a soft error leaves the connection usable
        probe = conn.channel()
        probe.exchange_declare("amq.direct", "direct", passive=True)
        probe.close()
        return info.value.reply_code, info.value.reply_text
    finally:
        if conn.is_open:
            conn.close()


def connection_error(server: ServerProcess, action: Callable[[Any], Any]) -> tuple[int, str]:
    """Run action on a fresh channel; it must close the whole connection."""
    conn = connect(server)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        action(ch)
    assert not conn.is_open
    return info.value.reply_code, info.value.reply_text


def declare_stream(server: ServerProcess, name: str, **arguments: Any) -> None:
    conn = connect(server)
    conn.channel().queue_declare(name, durable=True, arguments={**STREAM, **arguments})
    conn.close()


def rs(name: str) -> str:
    """RabbitMQ's resource rendering."""
    return f"queue '{name}' in vhost '/'"


# -- queue.declare ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "prop"),
    [
        ({"durable": False}, "non-durable"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
    ],
    ids=["non-durable", "exclusive", "auto-delete"],
)
def test_declare_stream_with_bad_flags(
    server: ServerProcess, qname: str, flags: dict[str, bool], prop: str
) -> None:
    code, text = channel_error(
        server, lambda ch: ch.queue_declare(qname, arguments=STREAM, **flags)
    )
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - invalid property '{prop}' for {rs(qname)}",
    )


def test_declare_server_named_stream(server: ServerProcess) -> None:
    code, text = channel_error(
        server, lambda ch: ch.queue_declare("", durable=True, arguments=STREAM)
    )
    assert (code, text) == (
        406,
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_stream_queue",
    )


@pytest.mark.parametrize("value", ["1x", "10ms", "0D", "7 D", "D"])
def test_declare_bad_max_age(server: ServerProcess, qname: str, value: str) -> None:
    code, text = channel_error(
        server,
        lambda ch: ch.queue_declare(qname, durable=True, arguments={**STREAM, "x-max-age": value}),
    )
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-max-age' for {rs(qname)}: invalid_max_age",
    )


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("x-max-length-bytes", "abc", "{unacceptable_type,longstr}"),
        ("x-max-length-bytes", -1, "{value_negative,-1}"),
        ("x-max-age", 5, "{unacceptable_type,long}"),  # pika sends every int as long
    ],
    ids=["length-bytes-str", "length-bytes-negative", "max-age-int"],
)
def test_declare_wrong_argument_type(
    server: ServerProcess, qname: str, key: str, value: Any, reason: str
) -> None:
    code, text = channel_error(
        server,
        lambda ch: ch.queue_declare(qname, durable=True, arguments={**STREAM, key: value}),
    )
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - invalid arg '{key}' for {rs(qname)}: {reason}",
    )


@pytest.mark.parametrize("size", [8, 15, 5000])
def test_declare_bad_filter_size(server: ServerProcess, qname: str, size: int) -> None:
    args = {**STREAM, "x-stream-filter-size-bytes": size}
    code, text = channel_error(
        server, lambda ch: ch.queue_declare(qname, durable=True, arguments=args)
    )
    assert (code, text) == (
        406,
        "PRECONDITION_FAILED - Invalid value for x-stream-filter-size-bytes",
    )


def test_declare_segment_size_above_max(server: ServerProcess, qname: str) -> None:
    args = {**STREAM, "x-stream-max-segment-size-bytes": 3_000_000_001}
    code, text = channel_error(
        server, lambda ch: ch.queue_declare(qname, durable=True, arguments=args)
    )
    assert (code, text) == (
        406,
        "PRECONDITION_FAILED - Exceeded max value for x-stream-max-segment-size-bytes",
    )


def test_declare_bad_compression(server: ServerProcess, qname: str) -> None:
    args = {**STREAM, "x-stream-compression": "gzip"}
    code, text = channel_error(
        server, lambda ch: ch.queue_declare(qname, durable=True, arguments=args)
    )
    assert code == 406
    assert text.startswith(
        f"PRECONDITION_FAILED - invalid arg 'x-stream-compression' for {rs(qname)}: "
    ), text


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("x-message-ttl", 1000),
        ("x-expires", 1000),
        ("x-max-length", 10),
        ("x-max-priority", 5),
        ("x-overflow", "reject-publish"),
        ("x-dead-letter-exchange", "dlx"),
        ("x-single-active-consumer", True),
        ("x-queue-mode", "lazy"),
        ("x-delivery-limit", 3),
    ],
)
def test_declare_argument_of_other_queue_type(
    server: ServerProcess, qname: str, key: str, value: Any
) -> None:
    code, text = channel_error(
        server,
        lambda ch: ch.queue_declare(qname, durable=True, arguments={**STREAM, key: value}),
    )
    prefix = f"PRECONDITION_FAILED - invalid arg '{key}' for {rs(qname)} of queue type "
    # either spelling of the type: "stream", or RabbitMQ's "rabbit_stream_queue"
    assert code == 406
    assert text in (prefix + "stream", prefix + "rabbit_stream_queue"), text


def test_unknown_x_argument_is_ignored(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ok = conn.channel().queue_declare(qname, durable=True, arguments={**STREAM, "x-foo": 1})
    assert ok.method.queue == qname
    conn.close()


def test_redeclare_with_different_stream_argument(server: ServerProcess, qname: str) -> None:
    declare_stream(server, qname, **{"x-max-age": "7D"})
    code, text = channel_error(
        server,
        lambda ch: ch.queue_declare(qname, durable=True, arguments={**STREAM, "x-max-age": "1D"}),
    )
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-age' for {rs(qname)}: "
        "received the value '1D' of type 'longstr' but current is the value '7D' of type "
        "'longstr'",
    )


def test_redeclare_same_arguments_is_ok(server: ServerProcess, qname: str) -> None:
    declare_stream(server, qname, **{"x-max-age": "7D", "x-max-length-bytes": 1_000_000})
    conn = connect(server)
    ch = conn.channel()
    # integer types compare by value: long 1_000_000 equals signedint 1_000_000
    args = {**STREAM, "x-max-age": "7D", "x-max-length-bytes": 1_000_000}
    ok = ch.queue_declare(qname, durable=True, arguments=args)
    assert ok.method.queue == qname
    ok = ch.queue_declare(qname, passive=True)
    assert ok.method.queue == qname
    conn.close()


def test_redeclare_non_durable(server: ServerProcess, qname: str) -> None:
    declare_stream(server, qname)
    code, text = channel_error(
        server, lambda ch: ch.queue_declare(qname, durable=False, arguments=STREAM)
    )
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for {rs(qname)}: "
        "received 'false' but current is 'true'",
    )


@pytest.mark.parametrize("qtype", ["classic", "quorum"])
def test_declare_other_queue_type(server: ServerProcess, qname: str, qtype: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ok = ch.queue_declare(qname, durable=True, arguments={"x-queue-type": qtype}).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (qname, 0, 0)
    ch.queue_declare(qname, durable=True, arguments={"x-queue-type": qtype})  # equivalent
    ch.queue_delete(qname)
    conn.close()


def test_declare_without_type_is_classic(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True)
    ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "classic"})  # the default
    assert ch.basic_get(qname) == (None, None, None)  # basic.get works: not a stream
    conn.close()
    code, text = channel_error(
        server, lambda ch: ch.queue_declare(qname, durable=True, arguments=STREAM)
    )
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for {rs(qname)}: "
        "received the value 'stream' of type 'longstr' but current is none",
    )


def test_declare_missing_queue_passive(server: ServerProcess, qname: str) -> None:
    code, text = channel_error(server, lambda ch: ch.queue_declare(qname, passive=True))
    assert (code, text) == (404, f"NOT_FOUND - no {rs(qname)}")


# -- basic.consume / get / purge -----------------------------------------------------------


def test_consume_without_qos(server: ServerProcess, qname: str) -> None:
    declare_stream(server, qname)
    code, text = channel_error(server, lambda ch: ch.basic_consume(qname, lambda *a: None))
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - consumer prefetch count is not set for stream {rs(qname)}",
    )


def test_consume_no_ack(server: ServerProcess, qname: str) -> None:
    declare_stream(server, qname)

    def action(ch: Any) -> None:
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(qname, lambda *a: None, auto_ack=True)

    code, text = connection_error(server, action)
    assert (code, text) == (
        540,
        f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream {rs(qname)}",
    )


def test_consume_with_global_qos(server: ServerProcess, qname: str) -> None:
    declare_stream(server, qname)

    def action(ch: Any) -> None:
        ch.basic_qos(prefetch_count=10)
        ch.basic_qos(prefetch_count=10, global_qos=True)
        ch.basic_consume(qname, lambda *a: None)

    code, text = connection_error(server, action)
    assert (code, text) == (540, f"NOT_IMPLEMENTED - {rs(qname)} does not support global qos")


@pytest.mark.parametrize("offset", ["foo", "10x", "1 h", ""])
def test_consume_bad_offset(server: ServerProcess, qname: str, offset: str) -> None:
    declare_stream(server, qname)

    def action(ch: Any) -> None:
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(qname, lambda *a: None, arguments={"x-stream-offset": offset})

    code, text = channel_error(server, action)
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-stream-offset' for {rs(qname)}: "
        f'{{invalid_stream_offset_arg,{{longstr,<<"{offset}">>}}}}',
    )


@pytest.mark.parametrize("value", [[], 5, [1, 2]], ids=["empty-array", "int", "int-array"])
def test_consume_bad_filter(server: ServerProcess, qname: str, value: Any) -> None:
    declare_stream(server, qname)

    def action(ch: Any) -> None:
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(qname, lambda *a: None, arguments={"x-stream-filter": value})

    code, text = channel_error(server, action)
    assert code == 406
    assert text.startswith("PRECONDITION_FAILED - "), text
    assert "x-stream-filter" in text, text


def test_consume_missing_queue(server: ServerProcess, qname: str) -> None:
    def action(ch: Any) -> None:
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(qname, lambda *a: None)

    code, text = channel_error(server, action)
    assert (code, text) == (404, f"NOT_FOUND - no {rs(qname)}")


def test_basic_get(server: ServerProcess, qname: str) -> None:
    declare_stream(server, qname)
    code, text = connection_error(server, lambda ch: ch.basic_get(qname))
    assert (code, text) == (
        540,
        f"NOT_IMPLEMENTED - basic.get not supported by stream queues {rs(qname)}",
    )


def test_queue_purge(server: ServerProcess, qname: str) -> None:
    declare_stream(server, qname)
    code, text = connection_error(server, lambda ch: ch.queue_purge(qname))
    assert (code, text) == (
        540,
        f"NOT_IMPLEMENTED - queue.purge not supported by stream queues {rs(qname)}",
    )


# -- publishing ----------------------------------------------------------------------------


def test_publish_to_missing_exchange(server: ServerProcess, qname: str) -> None:
    def action(ch: Any) -> None:
        ch.confirm_delivery()
        ch.basic_publish(f"{qname}-nope", "rk", b"x")

    code, text = channel_error(server, action)
    assert (code, text) == (404, f"NOT_FOUND - no exchange '{qname}-nope' in vhost '/'")


def test_mandatory_unroutable_is_returned(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    returned: list[Any] = []
    ch.add_on_return_callback(lambda _ch, method, props, body: returned.append((method, body)))
    ch.basic_publish("amq.direct", f"{qname}-unbound", b"lost", mandatory=True)
    deadline = time.monotonic() + 15  # ends as soon as the wait is over
    while not returned and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    assert len(returned) == 1
    method, body = returned[0]
    assert (method.reply_code, method.reply_text) == (312, "NO_ROUTE")
    assert (method.exchange, method.routing_key, body) == (
        "amq.direct",
        f"{qname}-unbound",
        b"lost",
    )
    # the channel stays open and confirms still work
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("amq.direct", f"{qname}-unbound", b"lost", mandatory=True)
    assert ch.is_open
    conn.close()


def test_publish_immediate(server: ServerProcess, qname: str) -> None:
    client = RawClient(server.host, server.amqp_port)
    client.handshake()
    client.open_channel()
    client.publish(1, "amq.direct", qname, b"\x00\x00", b"x", immediate=True)
    close = client.expect(commands.Connection.Close)
    assert close.reply_code == 540
    assert close.reply_text.startswith("NOT_IMPLEMENTED - "), close.reply_text
    client.close()


# -- exchanges -----------------------------------------------------------------------------


def test_declare_reserved_exchange_name(server: ServerProcess) -> None:
    code, text = channel_error(server, lambda ch: ch.exchange_declare("amq.foo", "direct"))
    assert (code, text) == (
        403,
        "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'",
    )


def test_redeclare_builtin_exchange(server: ServerProcess) -> None:
    # RabbitMQ checks the reserved prefix only for a new exchange; redeclaring a built-in one
    # is an equivalence check like for any existing exchange
    conn = connect(server)
    conn.channel().exchange_declare("amq.direct", "direct", durable=True)
    conn.close()
    code, text = channel_error(
        server, lambda ch: ch.exchange_declare("amq.direct", "direct", durable=False)
    )
    assert code == 406
    assert text.startswith(
        "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'amq.direct' in vhost '/'"
    ), text


def test_passive_declare_of_builtin_exchanges(server: ServerProcess) -> None:
    conn = connect(server)
    ch = conn.channel()
    for name, kind in [
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ]:
        ch.exchange_declare(name, kind, passive=True)
    conn.close()


def test_passive_declare_of_missing_exchange(server: ServerProcess, qname: str) -> None:
    code, text = channel_error(server, lambda ch: ch.exchange_declare(qname, passive=True))
    assert (code, text) == (404, f"NOT_FOUND - no exchange '{qname}' in vhost '/'")


# -- connection level ---------------------------------------------------------------------


def test_tune_and_capabilities(server: ServerProcess) -> None:
    client = RawClient(server.host, server.amqp_port)
    tune = client.handshake()
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    caps = client.server_properties["capabilities"]
    for cap in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
        "consumer_priorities",
        "direct_reply_to",
    ):
        assert caps.get(cap) is True, cap
    client.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_login_mechanisms(server: ServerProcess, mechanism: str) -> None:
    client = RawClient(server.host, server.amqp_port)
    client.handshake(mechanism=mechanism)
    client.open_channel()
    client.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_bad_login(server: ServerProcess, mechanism: str) -> None:
    client = RawClient(server.host, server.amqp_port)
    client.send(PROTOCOL_HEADER)
    client.expect(commands.Connection.Start)
    from sievemq.testing.raw import sasl_response

    client.send_frame(
        commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism=mechanism,
            response=sasl_response(mechanism, "guest", "wrong"),
            locale="en_US",
        )
    )
    close = client.expect(commands.Connection.Close)
    assert close.reply_code == 403
    assert close.reply_text.startswith("ACCESS_REFUSED - "), close.reply_text
    client.send_frame(commands.Connection.CloseOk())
    assert client.read_until_eof() == b""
    client.close()


def test_bad_login_with_pika(server: ServerProcess) -> None:
    params = pika.URLParameters(f"amqp://guest:wrong@{server.host}:{server.amqp_port}/%2F")
    with pytest.raises(
        (pika.exceptions.ProbableAuthenticationError, pika.exceptions.AuthenticationError)
    ):
        pika.BlockingConnection(params)


@pytest.mark.parametrize(
    "header",
    [
        b"AMQP\x01\x01\x00\x09",
        b"AMQP\x00\x00\x09\x00",
        b"AMQP\x00\x01\x00\x00",
        b"GET / HTTP/1.1\r\n\r\n",
    ],
    ids=["0-8", "0-9", "1-0", "http"],
)
def test_wrong_protocol_header(server: ServerProcess, header: bytes) -> None:
    client = RawClient(server.host, server.amqp_port)
    client.send(header)
    assert client.read_until_eof() == PROTOCOL_HEADER
    client.close()


@pytest.mark.parametrize(
    "bad",
    [
        # a method frame whose frame-end octet is wrong
        b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00\x28\x00",
        # an unknown frame type
        b"\x09\x00\x01\x00\x00\x00\x01\x00\xce",
        # a frame larger than the negotiated frame_max
        b"\x03\x00\x01\x00\x10\x00\x00" + b"\x00" * 64,
    ],
    ids=["bad-frame-end", "unknown-type", "oversize"],
)
def test_malformed_frame(server: ServerProcess, qname: str, bad: bytes) -> None:
    # a healthy connection first, that must not notice anything
    good = connect(server)
    gch = good.channel()
    gch.confirm_delivery()
    gch.queue_declare(qname, durable=True, arguments=STREAM)
    gch.basic_publish("", qname, b"before")

    client = RawClient(server.host, server.amqp_port)
    client.handshake()
    client.open_channel()
    client.send(bad)
    try:
        close = client.expect(commands.Connection.Close)
    except Closed:
        pytest.fail("socket closed without connection.close 501")
    assert close.reply_code == 501
    assert close.reply_text.startswith("FRAME_ERROR - "), close.reply_text
    client.close()

    gch.basic_publish("", qname, b"after")
    gch.basic_qos(prefetch_count=10)
    bodies = []
    for method, _props, body in gch.consume(
        qname, arguments={"x-stream-offset": "first"}, inactivity_timeout=2
    ):
        if method is None:
            break
        bodies.append(body)
        gch.basic_ack(method.delivery_tag)
        if len(bodies) == 2:
            break
    assert bodies == [b"before", b"after"]
    good.close()
