"""A forwarded queue's bookkeeping without a peer: what it writes on its link channel, and
which client confirms each answer of the leader settles (runs, nacks, a lost link)."""

from __future__ import annotations

from typing import Any

from sievemq.amqp import frames, hotcodec
from sievemq.cluster.forwarding import ForwardedQueue
from sievemq.cluster.link import LinkChannel, LinkReceiver
from sievemq.storage import Message


class Sink:
    """A client channel: records what it is told."""

    def __init__(self) -> None:
        self.settled: list[tuple[list[int], bool]] = []

    def settle_confirms(self, seqs: list[int], ok: bool) -> None:
        self.settled.append((seqs, ok))


class FakeLinks:
    """``Links`` with one channel that keeps what is written to it."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.opened: list[tuple[str, str, str]] = []
        self.closed = 0

    def channels_open(self, node: str, vhost: str) -> int:
        return len(self.opened) - self.closed

    def open_channel(self, node: str, vhost: str, receiver: LinkReceiver, target: str) -> Any:
        self.opened.append((node, vhost, target))
        links = self

        class Channel:
            number = 7
            frame_max = 4096

            def writelines(self, parts: Any) -> None:
                links.written.append(b"".join(parts))

            def write(self, data: bytes) -> None:
                links.written.append(data)

            def send_method(self, method: Any) -> None:
                links.written.append(b"method")

            def close(self) -> None:
                links.closed += 1

        return Channel()


def message(body: bytes, exchange: str = "", routing_key: str = "q") -> Message:
    return Message((), exchange, routing_key, b"\x00\x00", body)


def ack(tag: int, multiple: bool, ok: bool = True) -> list[tuple[int, bytes]]:
    encode = hotcodec.encode_basic_ack if ok else hotcodec.encode_basic_nack
    return [(frames.FRAME_METHOD, encode(7, tag, multiple)[7:-1])]


def queue() -> tuple[ForwardedQueue, FakeLinks]:
    links = FakeLinks()
    return ForwardedQueue(links, "/", "q", "a"), links  # type: ignore[arg-type]


def test_a_publish_is_framed_on_the_pinned_channel_with_its_exchange_and_key() -> None:
    forwarded, links = queue()
    forwarded.submit(message(b"hello", "logs", "app.error"), None, 0)
    assert links.opened == [("a", "/", "q")]
    assert links.written[0] == b"method"  # confirm.select first
    got = frames.FrameReader(4096, 65536).feed(links.written[1])
    assert [(t, ch) for t, ch, _ in got] == [(1, 7), (2, 7), (3, 7)]
    publish = hotcodec.decode_basic_publish(got[0][2])
    assert (publish.exchange, publish.routing_key, publish.mandatory) == (
        "logs",
        "app.error",
        False,
    )
    assert got[2][2] == b"hello"


def test_a_run_of_confirms_settles_each_client_channel_once() -> None:
    forwarded, _ = queue()
    one, two = Sink(), Sink()
    for seq in (1, 2, 3):
        forwarded.submit(message(b"x"), one, seq)
    forwarded.submit(message(b"x"), two, 10)
    forwarded.submit(message(b"x"), one, 4)
    channel: LinkChannel = forwarded._channel  # type: ignore[assignment]
    forwarded.link_frames(channel, ack(2, True))
    assert one.settled == [([1, 2], True)]
    forwarded.link_frames(channel, ack(4, True, ok=False))
    assert one.settled[1:] == [([3], False)] and two.settled == [([10], False)]
    forwarded.link_frames(channel, ack(5, False))
    assert one.settled[2:] == [([4], True)]
    forwarded.link_frames(channel, ack(5, True))  # answered already: nothing more
    assert len(one.settled) == 3 and forwarded.unconfirmed == 0


def test_a_lost_link_nacks_what_was_not_confirmed_and_the_next_publish_reopens() -> None:
    forwarded, links = queue()
    sink = Sink()
    for seq in range(1, 6):
        forwarded.submit(message(b"x"), sink, seq)
    channel: LinkChannel = forwarded._channel  # type: ignore[assignment]
    forwarded.link_frames(channel, ack(2, True))
    forwarded.link_closed(channel, 0, "link to node 'a' lost")
    assert sink.settled == [([1, 2], True), ([3, 4, 5], False)]
    forwarded.submit(message(b"x"), sink, 6)
    assert len(links.opened) == 2 and forwarded.unconfirmed == 1


def test_a_retired_queue_closes_its_channel_once_answered() -> None:
    forwarded, links = queue()
    forwarded.submit(message(b"x"), Sink(), 1)
    channel: LinkChannel = forwarded._channel  # type: ignore[assignment]
    forwarded.retire()
    assert links.closed == 0
    forwarded.link_frames(channel, ack(1, False))
    assert links.closed == 1


class RawSink(Sink):
    """A client channel on the raw path: also told of a refusal (never here)."""

    def raw_refused(self, code: int, text: str) -> None:
        raise AssertionError(f"refused: {code} {text}")


def test_a_moved_leader_nacks_at_once_what_it_did_not_confirm_raw_forwards_too() -> None:
    forwarded, links = queue()
    shared, client = Sink(), RawSink()
    for seq in (1, 2, 3):
        forwarded.submit(message(b"x"), shared, seq)
    raw = forwarded.open_raw(client, "", "q")
    assert raw is not None
    raw.framing()
    raw.send_run([b"publish"], 4, True, 11)  # the client's 11..14
    channel: LinkChannel = forwarded._channel  # type: ignore[assignment]
    forwarded.link_frames(channel, ack(1, False))
    forwarded.leader_moved("b")  # the record names b: a's answers may never come
    assert shared.settled == [([1], True), ([2, 3], False)]
    assert client.settled == [([11, 12, 13, 14], False)]
    assert links.closed == 2 and forwarded.unconfirmed == raw.unconfirmed == 0
    forwarded.link_frames(channel, ack(3, True))  # a late confirm of the old leader: dropped
    assert len(shared.settled) == 2
    assert forwarded.open_raw(client, "", "q") is None  # routing asks the records again


def test_route_asks_the_directory_only_on_a_miss(tmp_path: Any) -> None:
    from sievemq.gateway.model.broker import Broker

    broker = Broker(tmp_path)
    try:
        vhost = broker.vhosts["/"]
        vhost.declare_queue("here", durable=True, arguments={"x-queue-type": "stream"})
        asked: list[str] = []

        def remote(name: str) -> Any:
            asked.append(name)
            return "remote " + name if name == "there" else None

        assert [q.name for q in vhost.route("", "here", lambda: None, remote)] == ["here"]
        assert vhost.route("", "there", lambda: None, remote) == ["remote there"]
        assert vhost.route("", "nowhere", lambda: None, remote) == []
        assert vhost.route("", "there", lambda: None) == []  # a single node asks nobody
        assert asked == ["there", "nowhere"]
    finally:
        broker.close()
