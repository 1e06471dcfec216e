"""Ack/nack/reject of tags that are not outstanding and publishes to a missing exchange:
the channel.close a client sees (reply code, text, class and method ids), as RabbitMQ sends."""

from __future__ import annotations

import pytest
from pamqp import commands

from sievemq.testing import ServerProcess
from sievemq.testing.raw import RawClient

STREAM = {"x-queue-type": "stream"}


def _consuming(server: ServerProcess, queue: str, messages: int) -> tuple[RawClient, list[int]]:
    """A raw client consuming ``messages`` published messages; their delivery tags."""
    client = RawClient(server.host, server.amqp_port)
    client.handshake()
    client.open_channel(1)
    client.rpc(commands.Queue.Declare(queue=queue, durable=True, arguments=STREAM))
    client.rpc(commands.Confirm.Select())
    for i in range(messages):
        client.publish(1, "", queue, b"\x00\x00", b"m%d" % i)
    confirmed = 0
    while confirmed < messages:
        _, ack = client.next_method()
        assert isinstance(ack, commands.Basic.Ack)
        confirmed = ack.delivery_tag if ack.multiple else confirmed + 1
    client.rpc(commands.Basic.Qos(prefetch_count=10))
    args = {"x-stream-offset": "first"}
    client.rpc(commands.Basic.Consume(queue=queue, consumer_tag="c", arguments=args))
    tags = [client.read_message()[0].delivery_tag for _ in range(messages)]
    return client, tags


def _channel_close(client: RawClient) -> commands.Channel.Close:
    channel, close = client.next_method()
    assert channel == 1 and isinstance(close, commands.Channel.Close), close
    return close


@pytest.mark.parametrize(
    ("method", "method_id"),
    [
        (commands.Basic.Ack(delivery_tag=99, multiple=True), 80),
        (commands.Basic.Ack(delivery_tag=99), 80),
        (commands.Basic.Nack(delivery_tag=99, multiple=True), 120),
        (commands.Basic.Nack(delivery_tag=99), 120),
        (commands.Basic.Reject(delivery_tag=99), 90),
    ],
)
def test_unknown_delivery_tag_names_the_method(
    server: ServerProcess, qname: str, method: object, method_id: int
) -> None:
    client, tags = _consuming(server, qname, 3)
    assert tags == [1, 2, 3]
    client.send_frame(method, 1)
    close = _channel_close(client)
    assert close.reply_code == 406
    assert close.reply_text == "PRECONDITION_FAILED - unknown delivery tag 99"
    assert (close.class_id, close.method_id) == (60, method_id)


def test_ack_multiple_of_a_tag_already_acked_is_refused(server: ServerProcess, qname: str) -> None:
    client, _ = _consuming(server, qname, 3)
    client.send_frame(commands.Basic.Ack(delivery_tag=2), 1)
    client.send_frame(commands.Basic.Ack(delivery_tag=2, multiple=True), 1)
    close = _channel_close(client)
    assert close.reply_text == "PRECONDITION_FAILED - unknown delivery tag 2"
    assert (close.class_id, close.method_id) == (60, 80)


def test_ack_multiple_with_tag_zero_acks_everything(server: ServerProcess, qname: str) -> None:
    client, _ = _consuming(server, qname, 3)
    client.send_frame(commands.Basic.Ack(delivery_tag=0, multiple=True), 1)
    # nothing is outstanding any more: acking tag 1 now is an unknown tag
    client.send_frame(commands.Basic.Ack(delivery_tag=1), 1)
    close = _channel_close(client)
    assert close.reply_text == "PRECONDITION_FAILED - unknown delivery tag 1"


def test_publish_to_a_missing_exchange_closes_the_channel_naming_basic_publish(
    server: ServerProcess,
) -> None:
    client = RawClient(server.host, server.amqp_port)
    client.handshake()
    client.open_channel(1)
    client.publish(1, "no-such-exchange", "rk", b"\x00\x00", b"x")
    close = _channel_close(client)
    assert close.reply_code == 404
    assert close.reply_text == "NOT_FOUND - no exchange 'no-such-exchange' in vhost '/'"
    assert (close.class_id, close.method_id) == (60, 40)


def test_channel_flow_stop_is_540_and_start_is_flow_ok(server: ServerProcess) -> None:
    """channel.flow active=false: 540 NOT_IMPLEMENTED "active=false" closes the connection,
    as RabbitMQ answers it (the Go client's suite checks for that code); active=true: flow-ok."""
    client = RawClient(server.host, server.amqp_port)
    client.handshake()
    client.open_channel(1)
    ok = client.rpc(commands.Channel.Flow(active=True))
    assert isinstance(ok, commands.Channel.FlowOk) and ok.active
    client.send_frame(commands.Channel.Flow(active=False), 1)
    close = client.expect(commands.Connection.Close)
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - active=false")
    assert (close.class_id, close.method_id) == (20, 20)
    client.close()


def test_crossing_channel_closes_leave_the_connection_open(server: ServerProcess) -> None:
    """The server closes channel 1 (404) while the client closes it too: each answers the
    other's close; the client's late close-ok is dropped and channel 2 goes on (amqp091-go
    TestChannelExceptionWithCloseIssue43; a 504 here closed the whole connection)."""
    client = RawClient(server.host, server.amqp_port)
    client.handshake()
    client.open_channel(1)
    client.open_channel(2)
    client.publish(1, "no-such-exchange", "k", b"\x00\x00", b"x")
    client.send_frame(commands.Channel.Close(200, "bye", 0, 0), 1)
    got = [client.next_method(), client.next_method()]
    kinds = {(ch, type(m)) for ch, m in got}
    assert kinds == {(1, commands.Channel.Close), (1, commands.Channel.CloseOk)}, got
    client.send_frame(commands.Channel.CloseOk(), 1)  # answering the server's close
    ok = client.rpc(commands.Exchange.Declare(exchange="still-here", exchange_type="direct"), 2)
    assert isinstance(ok, commands.Exchange.DeclareOk)
    client.close()
