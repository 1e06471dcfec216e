"""The relay of a remote consumer's deliveries, byte for byte, and the settles it sends back.

The integration tests (tests/integration/test_cluster/test_remote_consume.py) run it between
real nodes; here the frames a leader writes (the hand codec's, as a leader's consumer encodes
them) go through ``RemoteConsumer.link_frames`` and what the client would read is parsed
back: only the channel number and the delivery tag differ, a body too large for the client's
frame_max is split, and the client's acks reach the link as the link's tags.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pamqp.commands as spec
import pytest

from sievemq.amqp import codec, errors, frames, hotcodec
from sievemq.amqp.methods import METHOD_ACK, METHOD_NACK
from sievemq.amqp.spans import (
    FRAME_RELAY,
    RELAY_AT,
    SpanReader,
    client_frames,
    frames_of,
    relay_frames,
)
from sievemq.gateway.model.directory import LeaderQueue
from sievemq.gateway.session.remote import RemoteConsumer, RemoteDeliveries

LINK_CHANNEL = 3
CLIENT_CHANNEL = 7
TAG = "amq.ctag-relay"
PROPS = b"\x80\x00" + hotcodec.encode_shortstr("text/plain")


class Loop:
    def __init__(self) -> None:
        self.soon: list[Callable[[], None]] = []

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.soon.append(fn)

    def run(self) -> None:
        while self.soon:
            self.soon.pop(0)()


class Node:
    def __init__(self) -> None:
        self.loop = Loop()


class Connection:
    id = 1
    cancel_notify = True

    def __init__(self, frame_max: int) -> None:
        self.frame_max = frame_max
        self.node = Node()
        self.written: list[bytes] = []

    def write_joined(self, data: bytes) -> None:
        self.written.append(data)


class Channel:
    id = CLIENT_CHANNEL
    prefetch = 10
    global_prefetch = 0
    closing = False
    backlog = None

    def __init__(self, frame_max: int) -> None:
        self.connection = Connection(frame_max)
        self.next_delivery_tag = 1
        self.unacked: dict[int, Any] = {}
        self.consumers: dict[str, Any] = {}
        self.remote: RemoteDeliveries | None = None


class Link:
    number = LINK_CHANNEL
    frame_max = 131072
    relay = False

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True


def leader_bytes(first_tag: int, bodies: list[bytes], number: int = LINK_CHANNEL) -> bytes:
    encoder = hotcodec.DeliveryEncoder(number, TAG, 131072)
    out: list[bytes] = []
    for i, body in enumerate(bodies):
        encoder.encode(out, first_tag + i, "", "orders", PROPS, body, 100 + i)
    return b"".join(out)


def leader_frames(first_tag: int, bodies: list[bytes], frame_max: int = 131072) -> list[Any]:
    """What a leader's stream consumer writes on the link channel, read back as frames."""
    encoder = hotcodec.DeliveryEncoder(LINK_CHANNEL, TAG, frame_max)
    out: list[bytes] = []
    for i, body in enumerate(bodies):
        encoder.encode(out, first_tag + i, "", "orders", PROPS, body, 100 + i)
    return frames.FrameReader(frame_max, 4 * frame_max).feed(b"".join(out))


def consumer(frame_max: int = 131072) -> tuple[Channel, RemoteConsumer, Link]:
    channel = Channel(frame_max)
    remote = channel.remote = RemoteDeliveries(channel)  # type: ignore[arg-type]
    relay = RemoteConsumer(channel, TAG, LeaderQueue("/", "orders", "a"), 10, False)  # type: ignore[arg-type]
    link = relay.link = Link()
    remote.users.append(relay)
    channel.consumers[TAG] = relay
    return channel, relay, link


def test_deliveries_reach_the_client_with_its_channel_and_tags_only_changed() -> None:
    channel, relay, link = consumer()
    channel.next_delivery_tag = 5  # four local deliveries went out before
    got = leader_frames(40, [b"a" * 10, b"", b"c" * 300])
    relay.link_frames(link, [(ftype, payload) for ftype, _, payload in got])
    [data] = channel.connection.written
    seen = frames.FrameReader(131072, 1 << 20).feed(data)
    assert [(t, ch) for t, ch, _ in seen] == [
        (t, CLIENT_CHANNEL) for t, _, _ in got
    ]  # the empty body: no body frame, as the leader sent it
    expect = leader_frames(5, [b"a" * 10, b"", b"c" * 300])
    assert [p for _, _, p in seen] == [p for _, _, p in expect]
    assert relay.out == {5: 40, 6: 41, 7: 42}
    assert channel.unacked == dict.fromkeys((5, 6, 7), relay)
    assert channel.next_delivery_tag == 8 and relay.delivered == 3


def test_a_body_larger_than_the_clients_frame_max_is_split() -> None:
    channel, relay, link = consumer(frame_max=4096)
    body = bytes(range(256)) * 40  # 10240 bytes: one frame on the link
    got = leader_frames(1, [body])
    relay.link_frames(link, [(ftype, payload) for ftype, _, payload in got])
    seen = frames.FrameReader(4096, 1 << 20).feed(channel.connection.written[0])
    bodies = [p for t, _, p in seen if t == frames.FRAME_BODY]
    assert len(bodies) == 3 and b"".join(bodies) == body
    assert all(len(p) <= 4096 - 8 for p in bodies)


def test_acks_go_back_as_the_links_tags_one_multiple_ack_when_nothing_older_waits() -> None:
    channel, relay, link = consumer()
    remote = channel.remote
    assert remote is not None
    got = leader_frames(11, [b"x"] * 4)
    relay.link_frames(link, [(ftype, payload) for ftype, _, payload in got])  # tags 1-4
    remote.settle(1, False, True, METHOD_ACK)
    remote.settle(2, False, True, METHOD_ACK)
    channel.connection.node.loop.run()
    assert link.written == [hotcodec.encode_basic_ack(LINK_CHANNEL, 12, True)]
    link.written.clear()
    remote.settle(4, False, True, METHOD_ACK)  # 3 still waits: this ack alone
    remote.settle(3, False, False, METHOD_NACK)  # requeue
    channel.connection.node.loop.run()
    assert link.written == [
        hotcodec.encode_basic_ack(LINK_CHANNEL, 14, False)
        + hotcodec.encode_basic_nack(LINK_CHANNEL, 13, False, True)
    ]
    assert relay.out == {}


def test_a_cancelled_consumer_requeues_what_crossed_the_cancel_and_closes_when_settled() -> None:
    channel, relay, link = consumer()
    remote = channel.remote
    assert remote is not None
    got = leader_frames(1, [b"x", b"y"])
    relay.link_frames(link, [(ftype, payload) for ftype, _, payload in got[:3]])  # tag 1
    relay.stop()  # the client cancelled: 1 is still unacked, so the link channel stays
    assert not link.closed
    relay.link_frames(link, [(ftype, payload) for ftype, _, payload in got[3:]])  # crossed
    assert len(channel.connection.written) == 1  # never shown to the client
    remote.settle(1, True, True, METHOD_ACK)
    channel.connection.node.loop.run()
    cancel, settles = link.written
    assert frames.FrameReader(4096, 4096).feed(cancel)[0][2][:4] == b"\x00\x3c\x00\x1e"
    assert settles == hotcodec.encode_basic_nack(
        LINK_CHANNEL, 2, False, True
    ) + hotcodec.encode_basic_ack(LINK_CHANNEL, 1, True)
    assert link.closed and relay not in remote.users


@pytest.mark.parametrize("frame_max", [131072, 4096])
@pytest.mark.parametrize("no_ack", [False, True])
@pytest.mark.parametrize("number", [LINK_CHANNEL, CLIENT_CHANNEL])
def test_a_span_is_relayed_byte_for_byte_as_the_frames_are(
    frame_max: int, no_ack: bool, number: int
) -> None:
    """Patched in place (or, for a client with a smaller frame_max, split as pairs): the
    client reads the same bytes, tags and outstanding deliveries either way, whether the
    link channel's number is the client's or not; a method amid the deliveries (here the
    consume-ok) is answered where it arrived."""
    consume_ok = codec.encode_method(number, spec.Basic.ConsumeOk(consumer_tag=TAG))
    bodies = [b"a" * 10, b"", bytes(range(256)) * 40, b"d"]
    data = leader_bytes(40, bodies[:2], number) + consume_ok + leader_bytes(42, bodies[2:], number)
    written = []
    for spans in (False, True):
        channel, relay, link = consumer(frame_max)
        link.number = number
        relay.no_ack = no_ack
        channel.next_delivery_tag = 3
        src, starts, _ = SpanReader(131072, 1 << 20).feed(data)
        if spans:
            relay.link_run(link, src, starts, 0, len(starts) - 1)  # type: ignore[arg-type]
        else:
            relay.link_frames(link, frames_of(src, starts, 0, len(starts) - 1))  # type: ignore[arg-type]
        written.append(b"".join(channel.connection.written))
        assert channel.next_delivery_tag == 7 and relay.delivered == 4
        assert relay.out == ({} if no_ack else {3: 40, 4: 41, 5: 42, 6: 43})
        assert channel.unacked == ({} if no_ack else dict.fromkeys((3, 4, 5, 6), relay))
    assert written[0] == written[1]
    seen = frames.FrameReader(131072, 1 << 20).feed(written[1])
    assert {ch for _, ch, _ in seen} == {CLIENT_CHANNEL}
    tags = [
        struct.unpack_from(">Q", p, 5 + len(TAG))[0]
        for t, _, p in seen
        if t == frames.FRAME_METHOD and p[:4] == b"\x00\x3c\x00\x3c"
    ]
    assert tags == [3, 4, 5, 6]


def test_a_span_after_the_cancel_requeues_as_the_frames_do() -> None:
    channel, relay, link = consumer()
    relay.stop()  # nothing outstanding: the link channel closes
    channel.connection.node.loop.run()
    src, starts, _ = SpanReader(131072, 1 << 20).feed(leader_bytes(9, [b"x"]))
    relay.link_run(link, src, starts, 0, len(starts) - 1)  # type: ignore[arg-type]
    channel.connection.node.loop.run()
    assert channel.connection.written == []


# ---------------------------------------------------------------------------- relay frames


def direct_consumer(frame_max: int = 131072) -> tuple[Channel, RemoteConsumer, Link]:
    """A consumer on a fresh channel whose link channel is a relay channel numbered as the
    client's: the leader's relay frames pass as they are."""
    channel, relay, link = consumer(frame_max)
    link.number = CLIENT_CHANNEL
    link.relay = True
    relay.direct = True
    assert channel.remote is not None
    channel.remote.direct = relay
    return channel, relay, link


def relayed(first_tag: int, bodies: list[bytes], frame_max: int = 131072) -> tuple[bytes, bytes]:
    """(what the client must read, the relay frames a leader's RelayChannel sends for it)."""
    data = leader_bytes(first_tag, bodies, CLIENT_CHANNEL)
    last = first_tag + len(bodies) - 1
    return data, b"".join(relay_frames(CLIENT_CHANNEL, data, last, frame_max))


def feed(relay: RemoteConsumer, link: Link, wire: bytes, reader: SpanReader) -> None:
    src, starts, _ = reader.feed(wire)
    if len(starts) > 1:
        relay.link_run(link, src, starts, 0, len(starts) - 1)  # type: ignore[arg-type]


def test_a_direct_consumer_writes_each_relayed_turn_as_it_came() -> None:
    channel, relay, link = direct_consumer()
    reader = SpanReader(131072, 1 << 20, relay=True)
    first, wire1 = relayed(1, [b"a" * 10, b"", b"c" * 300])
    big = [bytes([i]) * 50_000 for i in range(5)]  # one turn over three relay frames
    second, wire2 = relayed(4, big)
    wire = wire1 + wire2
    feed(relay, link, wire[:100], reader)  # no whole frame yet
    feed(relay, link, wire[100:-70_000], reader)  # the first turn, part of the second
    assert b"".join(channel.connection.written) == first
    feed(relay, link, wire[-70_000:], reader)
    assert b"".join(channel.connection.written) == first + second
    assert relay.high == 8 and relay.delivered == 8 and channel.unacked == {}
    assert channel.next_delivery_tag == 1  # the tags are the leader's
    relay.settle_direct(2, False, True, METHOD_ACK)
    relay.settle_direct(1, False, True, METHOD_ACK)
    relay.settle_direct(5, True, True, METHOD_ACK)
    channel.connection.node.loop.run()
    assert link.written == [
        hotcodec.encode_basic_ack(CLIENT_CHANNEL, 2, False)
        + hotcodec.encode_basic_ack(CLIENT_CHANNEL, 1, False)
        + hotcodec.encode_basic_ack(CLIENT_CHANNEL, 5, True)
    ]
    assert (relay.acked_upto, relay.singles, relay.owes()) == (5, set(), True)


def test_leaving_direct_mid_turn_records_what_the_client_holds_and_numbers_the_rest() -> None:
    """A get on the channel while a split turn is half read: the tags written so far stay
    the leader's (and outstanding), the rest of the turn is numbered by the channel."""
    channel, relay, link = direct_consumer()
    reader = SpanReader(131072, 1 << 20, relay=True)
    first, wire1 = relayed(1, [b"x", b"y", b"z"])
    _, wire2 = relayed(4, [bytes([i]) * 60_000 for i in range(4)])
    feed(relay, link, wire1 + wire2[:140_000], reader)
    assert b"".join(channel.connection.written) == first
    relay.settle_direct(2, False, True, METHOD_ACK)
    assert channel.remote is not None
    channel.remote.leave_direct()
    assert channel.remote.direct is None and not relay.direct
    assert channel.unacked == dict.fromkeys((1, 3), relay) and relay.out == {1: 1, 3: 3}
    assert channel.next_delivery_tag == 4
    channel.next_delivery_tag = 5  # the get took 4
    feed(relay, link, wire2[140_000:], reader)
    rest = frames.FrameReader(131072, 1 << 20).feed(b"".join(channel.connection.written[1:]))
    tags = [
        struct.unpack_from(">Q", p, 5 + len(TAG))[0]
        for t, _, p in rest
        if t == frames.FRAME_METHOD and p[:4] == b"\x00\x3c\x00\x3c"
    ]
    assert tags == [5, 6, 7, 8]
    assert relay.out == {1: 1, 3: 3, 5: 4, 6: 5, 7: 6, 8: 7}
    channel.connection.node.loop.run()
    relay.settle(7, True, True, METHOD_ACK)  # as RemoteDeliveries.settle maps tag 8
    channel.connection.node.loop.run()
    assert link.written[-1] == hotcodec.encode_basic_ack(CLIENT_CHANNEL, 7, True)


def test_a_direct_consumer_cancelled_requeues_what_crossed_the_cancel() -> None:
    channel, relay, link = direct_consumer()
    reader = SpanReader(131072, 1 << 20, relay=True)
    _, wire = relayed(1, [b"x", b"y"])
    feed(relay, link, wire, reader)
    relay.settle_direct(2, True, True, METHOD_ACK)
    relay.stop()  # nothing held: the link channel closes, the channel numbers again
    channel.connection.node.loop.run()
    assert link.closed and channel.next_delivery_tag == 3
    assert channel.remote is not None and channel.remote.direct is None
    _, late = relayed(3, [b"late"])
    feed(relay, link, late, reader)
    channel.connection.node.loop.run()
    assert len(channel.connection.written) == 1  # nothing after the cancel reached it


def test_relay_frames_round_trip_through_the_slow_path() -> None:
    data = leader_bytes(1, [b"q" * 200_000, b"r"], CLIENT_CHANNEL)
    wire = b"".join(relay_frames(CLIENT_CHANNEL, data, 2, 4096))
    src, starts, _ = SpanReader(4096, 1 << 20, relay=True).feed(wire)
    pieces = frames_of(src, starts, 0, len(starts) - 1)
    assert all(t == FRAME_RELAY for t, _ in pieces) and len(pieces) > 40
    joined = b"".join(p[RELAY_AT - 7 :] for _, p in pieces)
    assert joined == data
    assert client_frames(joined) == [
        (t, p) for t, _, p in frames.FrameReader(131072, 1 << 20).feed(data)
    ]
    with pytest.raises(errors.FrameError):
        SpanReader(4096, 1 << 20).feed(wire)  # a client's reader takes no relay frame
