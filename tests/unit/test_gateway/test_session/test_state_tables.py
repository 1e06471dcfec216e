"""The gateway's connection and channel follow the amqp.states tables, reply for reply.

The channel's hot path performs the table's content transitions inline (no call per frame);
these tests feed the same frame sequences to a real ``Connection`` (in one read, so the fused
publish path is taken where it can be, and one frame per read) and to a bare
``ChannelState`` / ``ConnectionState``, and require the same reply on the wire.
"""

from __future__ import annotations

import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands, frame

from sievemq.amqp import errors, methods, states
from sievemq.amqp.frames import FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD
from sievemq.amqp.states import ChannelPhase, ChannelState, ConnectionPhase, Next
from sievemq.gateway.model.broker import MessageCounters
from sievemq.gateway.model.users import Permission
from sievemq.gateway.runtime.node import Limits
from sievemq.gateway.session import channel as channel_module
from sievemq.gateway.session import connection as connection_module
from sievemq.gateway.session.connection import Connection

LIMIT = 64  # max_message_size of the test node
Frame = tuple[int, int, bytes]
Reply = tuple[int, str, int, int] | None


class _Handle:
    def cancel(self) -> None:
        pass


class _Loop:
    """Never runs anything by itself: the tests look at what the connection wrote
    synchronously (and may fire the timers it set: ``later``)."""

    def __init__(self) -> None:
        self.later: list[tuple[float, Any, tuple[Any, ...]]] = []

    def call_soon(self, *args: Any) -> _Handle:
        return _Handle()

    def call_later(self, delay: float, fn: Any, *args: Any) -> _Handle:
        self.later.append((delay, fn, args))
        return _Handle()


class _Transport:
    def __init__(self) -> None:
        self.data = b""
        self.closed = False

    def writelines(self, chunks: list[bytes]) -> None:
        self.data += b"".join(chunks)

    def write(self, chunk: bytes) -> None:
        self.data += chunk

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    abort = close

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5672) if name == "peername" else None


def _node() -> Any:
    # every message is unroutable: dropped; no vhost limits
    vhost = SimpleNamespace(route=lambda *args: [], name="/", limits={})
    # guest as the default definitions make it: every permission on "/", no user limits
    user = SimpleNamespace(
        name="guest",
        may_connect_from=lambda host: True,
        permissions={"/": Permission()},
        limits={},
    )
    broker = SimpleNamespace(
        users=SimpleNamespace(authenticate=lambda name, password: user, get=lambda name: user),
        open_vhost=lambda user, name: vhost,
        counters=MessageCounters(),
    )
    ids = iter(range(1, 1000))
    return SimpleNamespace(
        limits=Limits(max_message_size=LIMIT),
        loop=_Loop(),
        broker=broker,
        connections=set(),
        alarm_reasons=(),  # no resource alarm on
        link_flow=None,  # not in a cluster
        next_id=lambda: next(ids),
        # no vhost or user connection limits to refuse with; nothing counts opens
        connection_refusal=lambda vhost, username: None,
        note_opened=lambda conn, vhost, username: None,
        note_gone=lambda conn: None,
        # no durable definitions here: a method never waits for their fdatasync
        definitions_sync=SimpleNamespace(begin=lambda: 0, end=lambda began: None),
    )


def _replies(data: bytes) -> list[tuple[int, Any]]:
    out = []
    while data:
        used, channel, value = frame.unmarshal(data)
        data = data[used:]
        out.append((channel, value))
    return out


def _first_close(transport: _Transport) -> Reply:
    for _, value in _replies(transport.data):
        if isinstance(value, commands.Channel.Close | commands.Connection.Close):
            return value.reply_code, value.reply_text, value.class_id, value.method_id
    return None


def _method(channel: int, method: Any) -> Frame:
    return FRAME_METHOD, channel, struct.pack(">I", method.index) + method.marshal()


def _header(class_id: int, size: int) -> Frame:
    return FRAME_HEADER, 1, struct.pack(">HHQH", class_id, 0, size, 0)


def _body(size: int) -> Frame:
    return FRAME_BODY, 1, b"b" * size


OPEN_CHANNEL = _method(1, commands.Channel.Open())
PUBLISH = _method(1, commands.Basic.Publish(exchange="", routing_key="q"))

# what a client can send on channel 1, hot and cold, right and wrong
ALPHABET: list[Frame] = [
    PUBLISH,
    _method(1, commands.Basic.Ack(delivery_tag=0, multiple=True)),
    _method(1, commands.Basic.Qos(prefetch_count=5)),
    _method(1, commands.Channel.Flow(active=True)),
    _method(1, commands.Channel.Close(200, "", 0, 0)),
    _method(1, commands.Channel.CloseOk()),
    OPEN_CHANNEL,
    _method(1, commands.Basic.Deliver("c", 1, False, "", "q")),
    _method(1, commands.Connection.Start()),
    (FRAME_METHOD, 1, struct.pack(">HH", 60, 999)),
    _header(60, 0),
    _header(60, 3),
    _header(60, LIMIT + 1),
    _header(50, 3),
    _body(1),
    _body(2),
    _body(3),
]


def _opened_connection() -> tuple[Connection, _Transport]:
    conn = Connection(_node())
    transport = _Transport()
    conn.on_open(transport)  # type: ignore[arg-type]
    conn.on_frames(
        [
            _method(0, commands.Connection.StartOk(response="\0guest\0guest")),
            _method(0, commands.Connection.TuneOk(channel_max=10, frame_max=4096)),
            _method(0, commands.Connection.Open(virtual_host="/")),
        ]
    )
    assert conn.state.phase is ConnectionPhase.OPEN
    transport.data = b""
    return conn, transport


def _gateway(sequence: list[Frame], one_read: bool) -> tuple[Reply, ChannelPhase | None]:
    conn, transport = _opened_connection()
    reads = [[OPEN_CHANNEL, *sequence]] if one_read else [[f] for f in [OPEN_CHANNEL, *sequence]]
    for read in reads:
        conn.on_frames(read)
    reply = _first_close(transport)
    if reply is not None:
        return reply, None  # the channel or the connection is closing: no phase to compare
    channel = conn.channels.get(1)
    return None, channel.state.phase if channel else ChannelPhase.CLOSED


def _table(sequence: list[Frame]) -> tuple[Reply, ChannelPhase | None]:
    state = ChannelState(1, LIMIT)
    state.receive_method(methods.CHANNEL_OPEN)
    try:
        for ftype, _, payload in sequence:
            if ftype == FRAME_METHOD:
                state.receive_method(struct.unpack_from(">HH", payload))
            elif ftype == FRAME_HEADER:
                class_id, _, size = struct.unpack_from(">HHQ", payload)
                state.receive_header(class_id, size)
            else:
                state.receive_body(len(payload))
    except errors.AMQPError as error:
        return (error.reply_code, error.reply_text, error.class_id, error.method_id), None
    return None, state.phase


EXAMPLES = {
    "publish-publish": [PUBLISH, PUBLISH],
    "publish-body": [PUBLISH, _body(1)],
    "publish-header-ack": [PUBLISH, _header(60, 3), ALPHABET[1]],
    "header-alone": [_header(60, 3)],
    "body-alone": [_body(1)],
    "header-other-class": [PUBLISH, _header(50, 3)],
    "body-too-long": [PUBLISH, _header(60, 3), _body(2), _body(2)],
    "too-large": [PUBLISH, _header(60, LIMIT + 1), _body(1)],
    "split-body-then-qos": [PUBLISH, _header(60, 3), _body(1), _body(2), ALPHABET[2]],
    "empty-body": [PUBLISH, _header(60, 0), PUBLISH, _header(60, 3), _body(3)],
    "server-method": [ALPHABET[7]],
    "connection-method": [ALPHABET[8]],
    "unknown-method": [ALPHABET[9]],
    "reopen": [OPEN_CHANNEL],
    "close-ok-unasked": [ALPHABET[5]],
    "close-then-publish": [ALPHABET[4], PUBLISH],
    "close-then-reopen": [ALPHABET[4], OPEN_CHANNEL, PUBLISH, _header(60, 1), _body(1)],
}


@pytest.mark.parametrize("one_read", [True, False], ids=["one-read", "frame-by-frame"])
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_gateway_replies_as_the_channel_table(name: str, one_read: bool) -> None:
    sequence = EXAMPLES[name]
    expected = _table(sequence)
    assert _gateway(sequence, one_read) == expected


def test_the_examples_cover_every_reply_code_of_the_channel_table() -> None:
    codes = {reply[0] for reply, _ in map(_table, EXAMPLES.values()) if reply}
    assert codes == {406, 503, 504, 505, 540}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(ALPHABET), max_size=8), st.booleans())
def test_any_sequence_gets_the_table_reply(sequence: list[Frame], one_read: bool) -> None:
    assert _gateway(sequence, one_read) == _table(sequence)


def test_every_method_the_channel_table_dispatches_has_a_handler() -> None:
    hot = {
        methods.BASIC_PUBLISH,
        methods.BASIC_ACK,
        methods.BASIC_REJECT,
        methods.BASIC_NACK,
    }  # taken inline by on_frame
    dispatched = {m for table in states.CHANNEL_TRANSITIONS.values() for m in table} - hot
    dispatched -= {methods.CHANNEL_OPEN}  # opened by the connection
    handled = {(cls.index >> 16, cls.index & 0xFFFF) for cls in channel_module._COLD}
    assert handled == dispatched


def test_every_method_the_connection_table_accepts_has_a_handler() -> None:
    accepted = {m for table in states.CONNECTION_TRANSITIONS.values() for m in table}
    assert set(connection_module._CONNECTION_METHODS) == accepted


# --- connection ---------------------------------------------------------------------------------


def _handshake_close(frames: list[Frame]) -> tuple[Reply, Connection]:
    conn = Connection(_node())
    transport = _Transport()
    conn.on_open(transport)  # type: ignore[arg-type]
    conn.on_frames(frames)
    return _first_close(transport), conn


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([OPEN_CHANNEL], 505),  # a channel frame before open-ok
        ([_method(0, commands.Connection.Open())], 504),  # open before start-ok
        ([(FRAME_BODY, 0, b"x")], 505),  # content on channel 0
        ([(FRAME_METHOD, 0, struct.pack(">HH", 10, 99))], 540),
        ([_method(0, commands.Queue.Declare())], 504),  # another class on channel 0
    ],
    ids=["channel-frame", "open-first", "body-on-0", "unknown", "queue-declare-on-0"],
)
def test_gateway_replies_as_the_connection_table(frames: list[Frame], code: int) -> None:
    reply, conn = _handshake_close(frames)
    table = states.ConnectionState()
    with pytest.raises(errors.AMQPError) as info:
        ftype, chid, payload = frames[0]
        assert table.receive_frame(ftype, chid) is Next.DISPATCH
        table.receive_method(struct.unpack_from(">HH", payload))
    error = info.value
    assert error.reply_code == code
    assert reply == (code, error.reply_text, error.class_id, error.method_id)
    assert conn.state.phase is ConnectionPhase.CLOSING


def test_after_our_close_only_close_ok_counts() -> None:
    conn, transport = _opened_connection()
    conn.on_frames([_method(0, commands.Connection.CloseOk())])  # not asked for: 504
    assert _first_close(transport) is not None
    transport.data = b""
    conn.on_frames(
        [
            OPEN_CHANNEL,
            PUBLISH,
            (FRAME_HEARTBEAT, 0, b""),
            _method(0, commands.Connection.Open()),
            _method(0, commands.Connection.CloseOk()),
        ]
    )
    assert transport.data == b""  # everything before the close-ok was dropped silently
    assert transport.closed and conn.state.phase is ConnectionPhase.CLOSED


def test_client_close_during_the_handshake_is_answered() -> None:
    node = _node()
    conn = Connection(node)
    transport = _Transport()
    conn.on_open(transport)  # type: ignore[arg-type]
    transport.data = b""
    node.loop.later.clear()
    conn.on_frames([_method(0, commands.Connection.Close(200, "", 0, 0)), OPEN_CHANNEL])
    assert [type(v) for _, v in _replies(transport.data)] == [commands.Connection.CloseOk]
    assert conn.state.phase is ConnectionPhase.CLOSED
    # the client closes the socket once it has the close-ok (as with RabbitMQ); a client
    # that does not is closed by the server a second later
    assert not transport.closed
    [(delay, fire, args)] = node.loop.later
    assert delay == 1.0
    fire(*args)
    assert transport.closed


# --- docs ---------------------------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[4] / "docs" / "architecture.md"
BEGIN, END = "<!-- states:begin -->\n", "<!-- states:end -->"


def test_architecture_doc_shows_the_tables_as_they_are() -> None:
    text = DOC.read_text()
    section = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    assert section == states.markdown(), (
        "regenerate: python -c 'from sievemq.amqp import states; print(states.markdown())'"
    )
