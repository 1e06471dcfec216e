"""A raw route's run of publishes (``gateway/session/raw_publish.py``): which frames it
takes, how it frames them for the link, where it stops and leaves the ordinary path."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pamqp.commands as spec

from sievemq.amqp import codec, frames
from sievemq.amqp.states import ChannelPhase
from sievemq.gateway.runtime.direct_replies import PSEUDO_QUEUE
from sievemq.gateway.session.confirms import ConfirmTracker
from sievemq.gateway.session.raw_publish import RawRoute, remote_targets

LINK_METHOD = b"<link publish frame>"
CLIENT = 3  # the client's channel
LINK = 9  # the link channel's number
QUEUE = SimpleNamespace(name="queue", leader="a")  # a queue node ``a`` leads


class Publisher:
    """The link side (``cluster.forwarding.RawForward``), recording what it is handed."""

    def __init__(self) -> None:
        self.runs: list[tuple[bytes, int, bool, int]] = []
        self.retired = False

    def framing(self) -> tuple[bytes, int, int]:
        return LINK_METHOD, LINK, 1000

    def send_run(self, frames_out: list[bytes], count: int, confirmed: bool, first: int) -> None:
        self.runs.append((b"".join(frames_out), count, confirmed, first))

    def retire(self) -> None:
        self.retired = True


class Channel(SimpleNamespace):
    closing = False

    def settle_confirms(self, seqs: list[int], ok: bool) -> None: ...
    def close_by_server(self, error: Any) -> None: ...


def publish_method(routing_key: str = "q") -> bytes:
    return codec.encode_method(CLIENT, spec.Basic.Publish(exchange="", routing_key=routing_key))[
        7:-1
    ]


def header(body_size: int, props: bytes = b"\x00\x00", weight: int = 0) -> bytes:
    return struct.pack(">HHQ", 60, weight, body_size) + props


def message(
    body: bytes, props: bytes = b"\x00\x00", weight: int = 0, channel: int = CLIENT
) -> list[tuple[int, int, bytes]]:
    return [
        (frames.FRAME_METHOD, channel, publish_method()),
        (frames.FRAME_HEADER, channel, header(len(body), props, weight)),
        (frames.FRAME_BODY, channel, body),
    ]


def route(confirm: bool = True, routes_to: Any = QUEUE) -> tuple[RawRoute, Any, Publisher]:
    vhost = SimpleNamespace(route=lambda exchange, key, headers, remote: [routes_to])
    connection = SimpleNamespace(
        route_stamp=1,
        vhost=vhost,
        node=SimpleNamespace(limits=SimpleNamespace(max_message_size=500)),
    )
    channel = Channel(
        id=CLIENT,
        connection=connection,
        state=SimpleNamespace(phase=ChannelPhase.OPEN),
        confirm=ConfirmTracker(CLIENT) if confirm else None,
        tx=None,
        raw_tried=b"",
    )
    raw = RawRoute(channel, publish_method(), ("", "q", False), (QUEUE,), lambda name: None)  # type: ignore[arg-type]
    publisher = Publisher()
    raw.publisher = publisher
    channel.raw_route = raw
    return raw, channel, publisher


def linked(body: bytes, props: bytes = b"\x00\x00") -> bytes:
    """One publish as the link channel carries it."""
    head = header(len(body), props)
    return b"".join(
        (
            LINK_METHOD,
            struct.pack(">BHI", frames.FRAME_HEADER, LINK, len(head)),
            head,
            frames.FRAME_END_BYTE,
            struct.pack(">BHI", frames.FRAME_BODY, LINK, len(body)),
            body,
            frames.FRAME_END_BYTE,
        )
    )


def test_a_run_of_publishes_goes_as_one_framed_run_with_its_sequence_numbers() -> None:
    raw, channel, publisher = route()
    channel.confirm.next_seq = 5
    got = message(b"one") + message(b"two", b"\x80\x00\x05text/") + message(b"three")
    assert raw.forward_run(got, 0, len(got)) == 3
    assert publisher.runs == [
        (linked(b"one") + linked(b"two", b"\x80\x00\x05text/") + linked(b"three"), 3, True, 5)
    ]
    assert channel.confirm.next_seq == 8


def test_without_confirms_nothing_is_numbered() -> None:
    raw, _, publisher = route(confirm=False)
    got = message(b"x")
    assert raw.forward_run(got, 0, 3) == 1
    assert publisher.runs[0][1:] == (1, False, 0)


def test_the_run_stops_at_the_first_publish_the_ordinary_path_must_take() -> None:
    reply_to = b"\x00\x00" + PSEUDO_QUEUE.encode()
    for odd in (
        message(b"x", weight=7),  # a weight: the mark the leader would trust
        message(b"x", props=reply_to),  # rewritten by the ordinary path
        message(b"x" * 501),  # over max_message_size: the ordinary path's 406
        message(b"x", channel=CLIENT + 1),  # another channel's
        message(b"x")[:2],  # the body not in this read
        [(frames.FRAME_METHOD, CLIENT, publish_method("other")), *message(b"x")[1:]],
    ):
        raw, _, publisher = route()
        got = message(b"ok") + odd
        assert raw.forward_run(got, 0, len(got)) == 1, odd
        assert raw.forward_run(got, 3, len(got)) == 0, odd
        assert publisher.runs[0][0] == linked(b"ok")


def test_a_body_frame_that_is_not_the_whole_body_is_left_to_the_ordinary_path() -> None:
    raw, _, _ = route()
    got = message(b"part")
    got[1] = (frames.FRAME_HEADER, CLIENT, header(10))
    assert raw.forward_run(got, 0, 3) == 0


def test_a_changed_route_ends_the_raw_route_once_the_connection_moved() -> None:
    raw, channel, publisher = route(routes_to=SimpleNamespace(name="another", leader="a"))
    got = message(b"x")
    assert raw.forward_run(got, 0, 3) == 1  # the stamp has not moved: not checked again
    channel.connection.route_stamp += 1
    assert raw.forward_run(got, 0, 3) == 0
    assert channel.raw_route is None and publisher.retired and raw.method == b""


def test_a_route_still_valid_after_a_move_goes_on() -> None:
    raw, channel, _ = route()
    channel.connection.route_stamp += 5
    assert raw.forward_run(message(b"x"), 0, 3) == 1
    assert raw.stamp == channel.connection.route_stamp


def test_a_channel_in_a_transaction_leaves_the_raw_route() -> None:
    raw, channel, publisher = route()
    channel.tx = object()
    channel.connection.route_stamp += 1
    assert raw.forward_run(message(b"x"), 0, 3) == 0
    assert publisher.retired


def targets(*queues: Any) -> Any:
    vhost = SimpleNamespace(route=lambda exchange, key, headers, remote: list(queues))
    return remote_targets(vhost, "x", "k", lambda name: None)


def test_queues_one_other_node_leads_go_raw_together() -> None:
    other = SimpleNamespace(name="other", leader="a")
    assert targets(QUEUE) == ((QUEUE,), 1)
    assert targets(QUEUE, other) == ((QUEUE, other), 2)


def test_queues_of_two_leaders_or_nowhere_do_not_go_raw() -> None:
    assert targets(QUEUE, SimpleNamespace(name="elsewhere", leader="c")) is None
    assert targets() is None


def by_headers(reachable: dict[str, Any]) -> Any:
    """A vhost whose exchange routes by headers and may reach ``reachable`` (name: queue,
    led by another node; None: led by no one)."""

    def route(exchange: str, key: str, headers: Any, remote: Any) -> list[Any]:
        headers()
        raise AssertionError("unreachable")

    return SimpleNamespace(
        route=route,
        reachable_queues=lambda exchange: set(reachable),
        queues={},
        classic=SimpleNamespace(queues={}),
    )


def test_a_headers_exchange_goes_raw_when_one_other_node_leads_all_it_may_reach() -> None:
    other = SimpleNamespace(name="other", leader="a")
    reachable = {"queue": QUEUE, "other": other, "gone": None}
    vhost = by_headers(reachable)
    assert remote_targets(vhost, "h", "k", reachable.get) == ((other, QUEUE), 0)
    assert remote_targets(vhost, "h", "k", reachable.get, mandatory=True) is None
    reachable["c's"] = SimpleNamespace(name="c's", leader="c")
    assert remote_targets(by_headers(reachable), "h", "k", reachable.get) is None
