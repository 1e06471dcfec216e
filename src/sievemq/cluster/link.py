"""The inter-node link: AMQP 0-9-1 from this node to another node's cluster port.

A node talks to another through link connections to the peer's cluster port
(``--cluster-port``, announced as ``cluster=HOST:PORT``). The peer serves them with its
ordinary AMQP session code (``gateway.session.peer``): a forwarded publish takes the same
measured fast path as a client's. A link connection logs in with the cluster secret (PLAIN,
the connecting node's name as user, ``cluster/secret.py``), is trusted (it may open any
vhost and acts for clients whose permissions this node already checked) and opens ONE vhost,
as every AMQP connection does: there is one link connection per (peer, vhost) that is used,
opened lazily on the first channel, never more.

This side is a small asyncio protocol on the project's own codec (``sievemq.amqp``), not a
client library: frames pass through with only their channel number chosen here. Every write
of one event-loop turn, over every channel of a link connection, goes out in ONE
``writelines`` at the end of the turn.

API (``Links`` is created by ``cluster/joining.py``, one per node)::

    ch = links.open_channel("a", "/", receiver, target="orders")  # returns at once
    ch.number            # the link channel's number: frame what you write with it
    ch.write(data)       # whole encoded frames (channel ``ch.number``); queued in order and
    ch.writelines(parts) #   sent after the channel.open, pipelined (no wait for open-ok)
    ch.send_method(m)    # a pamqp method object (cold methods: confirm.select, basic.qos...)
    ch.close()           # channel.close; the receiver hears nothing more

    class Receiver(LinkReceiver):
        def link_frames(self, ch, frames): ...  # (frame type, payload) of every frame the
            # peer sent on ch in one read, in order: acks, nacks, deliveries (method, header,
            # body frames), returns, cancels, get-ok... (channel.open-ok and channel.close
            # are handled here and not passed on)
        def link_run(self, ch, src, starts, first, stop): ...  # optional, HOT PATH: the
            # same frames as one span of the read (amqp/spans.py): frame i is
            # src[starts[i]:starts[i + 1]] for first <= i < stop; the receiver copies
            # what it keeps (a relay patches channel numbers and tags into one copy)
        def link_closed(self, ch, code, text): ...  # ch is gone: the peer closed it
            # (channel.close: code and text as sent, already answered with close-ok), or the
            # link connection failed: code 0 and why (could not connect, refused, dropped,
            # connection.close from the peer). Called once, on the loop, never from within
            # ``open_channel``. Nothing sent on ch that was not answered will be.

``target``: a publishing channel's queue. The peer stores every message published on that
channel into that queue (its own, or nack when it holds no such queue), with the exchange
and routing key of the publish kept as published: the routing was done by this node. It
travels in channel.open's reserved field, which a link connection reads. Without a target,
a link channel is an ordinary channel of the vhost (consume, get, ack...).

``relay=True`` (a consumer's channel; ``number`` is its client's channel number): the
channel opens with ``RELAY_TARGET`` and that number, and the peer wraps each turn of its
deliveries on it in relay frames (``amqp/spans.py``): the frames as the client gets them
(numbered ``number``, whatever the link channel's own number), which the receiver writes
as they came. ``ch.relay`` says so.

**Flow control.** A link connection's write buffer (what the kernel has not taken yet, and
what waits for the connection to open) is bounded as a client connection's is by RabbitMQ's
credit flow: past ``HIGH_WATER_BYTES`` the link is ``over``, and a client connection whose
frames wrote to it in that read stops being read (``Links.hold``: the node's client
connections ask after each read) until every link it wrote to is back under
``LOW_WATER_BYTES`` (or failed). A leader that stops reading (frozen, slow) so holds the
publishers that go to it, and only them; what this node buffers for it stays near the mark.

A link connection that drops fails all its channels (``link_closed``, code 0). The next
``open_channel`` to that peer and vhost connects anew, but not before a backoff (0.1 s,
doubling to 5 s after each failure in a row, reset by a connection that opened): during it,
channels fail at once (on the next loop turn).

**Heartbeats** every lease TTL, at least 2 s and at most ``LINK_HEARTBEAT_S``
(``heartbeat_for``: 5 s with the default lease), asked of the peer in tune.ok, so both ends
drop a link silent for two intervals: 10-15 s by default (20-30 s with the 10 s of before).
That bounds the wait of what was forwarded to a node that keeps its lease but is cut from
this one (a ring), whose record neither goes nor names another leader. Two silent
intervals are twice the TTL: a stream's replicas count their leader lost after one TTL of
silence on the same loops, and a node's lease survives a loop lagging twice the TTL (it is
renewed from a thread: ``coordination``), so a loaded machine's lags drop no link sooner
than they already start elections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import struct
from collections.abc import Callable
from typing import Any, Final, Protocol, cast

import pamqp.commands as spec

from sievemq.amqp import codec, errors, frames, hotcodec
from sievemq.amqp.methods import CHANNEL_CLOSE, CHANNEL_CLOSE_OK, CHANNEL_OPEN
from sievemq.amqp.spans import CLASS_CHANNEL, RELAY_TARGET, SpanReader, frames_of
from sievemq.gateway.model.remote import ROUTED_TARGET

log = logging.getLogger("sievemq.cluster")

LINK_HEARTBEAT_S: Final = 10  # the longest interval (a long lease's TTL)
LINK_HEARTBEAT_MIN_S: Final = 2
BACKOFF_FIRST_S: Final = 0.1
BACKOFF_MAX_S: Final = 5.0
CONNECT_TIMEOUT_S: Final = 10.0
FRAME_MAX: Final = 131072
CHANNEL_MAX: Final = 2047
PRODUCT: Final = "SieveMQ cluster link"
# a link's write buffer past which the client connections writing to it stop being read,
# and under which they are read again (see "Flow control" above)
HIGH_WATER_BYTES: Final = 2 * 1024 * 1024
LOW_WATER_BYTES: Final = 512 * 1024

_METHOD_HEAD = struct.Struct(">BHIHH")
_CHANNEL_OPEN_OK: Final = (20, 11)
_CONNECTION_START: Final = (10, 10)
_CONNECTION_TUNE: Final = (10, 30)
_CONNECTION_OPEN_OK: Final = (10, 41)
_CONNECTION_CLOSE: Final = (10, 50)
_CONNECTION_CLOSE_OK: Final = (10, 51)


def heartbeat_for(ttl_s: float) -> int:
    """The link's heartbeat interval for a lease of ``ttl_s``: two intervals of silence, the
    drop, are twice the TTL (see "Heartbeats" above)."""
    return int(min(LINK_HEARTBEAT_S, max(LINK_HEARTBEAT_MIN_S, math.ceil(ttl_s))))


class LinkReceiver(Protocol):
    """Whoever opened a link channel: hears its frames and its end."""

    def link_frames(self, channel: LinkChannel, got: list[tuple[int, bytes]]) -> None: ...
    def link_closed(self, channel: LinkChannel, code: int, text: str) -> None: ...


RunHandler = Callable[["LinkChannel", bytes, list[int], int, int], None]


def encode_channel_open(channel: int, target: str) -> bytes:
    """channel.open with ``target`` in its reserved shortstr (pamqp allows only '0')."""
    field = hotcodec.encode_shortstr(target)
    return (
        _METHOD_HEAD.pack(1, channel, 4 + len(field), *CHANNEL_OPEN) + field + frames.FRAME_END_BYTE
    )


class LinkChannel:
    """One channel of a link connection (``Links.open_channel``)."""

    __slots__ = ("closed", "link", "number", "receiver", "relay", "run", "target")

    def __init__(self, link: LinkConnection, number: int, receiver: LinkReceiver, target: str):
        self.link = link
        self.number = number
        self.receiver = receiver
        self.target = target
        self.relay = target.startswith(RELAY_TARGET)  # deliveries come in relay frames
        self.closed = False
        # a receiver's ``link_run(ch, src, starts, first, stop)``: a run of frames as a span
        # of the read (``amqp/spans.py``), in place of ``link_frames``' pairs
        self.run: RunHandler | None = getattr(receiver, "link_run", None)

    @property
    def node(self) -> str:
        return self.link.node

    @property
    def frame_max(self) -> int:
        """The link's frame size (bodies are split by it)."""
        return self.link.frame_max

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.link.send(data)

    def writelines(self, parts: list[bytes] | tuple[bytes, ...]) -> None:
        if not self.closed:
            self.link.send_many(parts)

    def send_method(self, method: Any) -> None:
        self.write(codec.encode_method(self.number, method))

    def close(self) -> None:
        """Close the channel; nothing more is passed to its receiver."""
        if self.closed:
            return
        self.closed = True
        self.link.close_channel(self)


class LinkConnection(asyncio.Protocol):
    """One link connection to ``node`` in ``vhost``: handshake, channels, frames."""

    def __init__(self, links: Links, node: str, vhost: str) -> None:
        self.links = links
        self.node = node
        self.vhost = vhost
        self.loop = links.loop
        self.transport: asyncio.Transport | None = None
        self.reader = SpanReader(FRAME_MAX, 4 * FRAME_MAX, relay=True)
        self.frame_max = FRAME_MAX
        self.channel_max = CHANNEL_MAX
        self.channels: dict[int, LinkChannel] = {}
        self.opened = False  # connection.open-ok arrived
        self.failed = False
        self._next_number = 1
        self._out: list[bytes] = []  # frames of open channels, written at the end of the turn
        self._held: list[bytes] = []  # channel frames written before the connection opened
        self._flush_scheduled = False
        self._heartbeat: asyncio.TimerHandle | None = None
        self._heartbeat_s = 0
        self._received = True
        self._missed = 0
        self._closing_numbers: set[int] = set()  # closed by us, waiting for close-ok
        # flow control: over the high-water mark (the transport's buffer, or what waits for
        # the open); this turn's writes noted in ``Links.pressed``; who waits for the drain
        self.over = False
        self._held_bytes = 0
        self._pressing = False
        self._waiters: list[_Waiter] = []

    # ---------------------------------------------------------------- channels

    def open_channel(
        self, receiver: LinkReceiver, target: str, prefer: int = 0, relay: bool = False
    ) -> LinkChannel:
        """A channel numbered ``prefer`` when that one is free, else the next free one; with
        ``relay``, a relay channel whose deliveries are numbered ``prefer``."""
        if relay:
            target = f"{RELAY_TARGET}{prefer}"
        if 0 < prefer <= self.channel_max and not (
            prefer in self.channels or prefer in self._closing_numbers
        ):
            number = prefer
        else:
            number = self._free_number()
        channel = LinkChannel(self, number, receiver, target)
        if not number:  # every channel number in use: this one fails (on the next turn)
            why = f"no free channel on the link to node '{self.node}' ({self.channel_max} open)"
            self.loop.call_soon(self._fail_channel, channel, 0, why)
            return channel
        self.channels[number] = channel
        if self.failed:
            self.loop.call_soon(self._fail_channel, channel, 0, self.links.why_down(self.node))
            return channel
        self.send(encode_channel_open(number, target))
        return channel

    def _free_number(self) -> int:
        """A channel number not in use (0: none left)."""
        for _ in range(self.channel_max):
            number = self._next_number
            self._next_number = number % self.channel_max + 1
            if number not in self.channels and number not in self._closing_numbers:
                return number
        return 0

    def close_channel(self, channel: LinkChannel) -> None:
        if self.channels.get(channel.number) is channel:
            del self.channels[channel.number]
            if not self.failed:
                self._closing_numbers.add(channel.number)
                self.send(
                    codec.encode_method(channel.number, spec.Channel.Close(200, "closed", 0, 0))
                )

    def _fail_channel(self, channel: LinkChannel, code: int, text: str) -> None:
        if channel.closed:
            return
        channel.closed = True
        if self.channels.get(channel.number) is channel:
            del self.channels[channel.number]
        try:
            channel.receiver.link_closed(channel, code, text)
        except Exception:  # a receiver's bug must not take the link down
            log.exception("link to node '%s': a channel's receiver failed", self.node)

    # ---------------------------------------------------------------- writing

    def send(self, data: bytes) -> None:
        if self.over and not self._pressing:
            self._press()
        if not self.opened:
            self._hold([data])
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def send_many(self, parts: list[bytes] | tuple[bytes, ...]) -> None:
        if self.over and not self._pressing:
            self._press()
        if not self.opened:
            self._hold(parts)
            return
        self._out += parts
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def _hold(self, parts: list[bytes] | tuple[bytes, ...]) -> None:
        """Frames written before the connection opened: kept, and counted against the mark."""
        self._held += parts
        self._held_bytes += sum(map(len, parts))
        if self._held_bytes > HIGH_WATER_BYTES and not self.over:
            self.over = True
            self._press()

    # ---------------------------------------------------------------- flow control

    @property
    def buffered(self) -> int:
        """Bytes written to this link that the kernel has not taken yet."""
        transport = self.transport
        size = transport.get_write_buffer_size() if transport is not None else 0
        return size + self._held_bytes

    def _press(self) -> None:
        """Written to while over the mark: the reading client connection will hold."""
        self._pressing = True
        self.links.pressed.append(self)

    def pause_writing(self) -> None:  # asyncio: the buffer went past the high-water mark
        self.over = True

    def resume_writing(self) -> None:  # asyncio: the buffer went under the low-water mark
        self.over = False
        self._release()

    def _release(self) -> None:
        """Under the mark (or failed): the client connections held for it may read again."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.drained()

    def flush(self) -> None:
        """The turn's frames, joined into one buffer (a turn's forwarded publishes are
        hundreds of small pieces: one copy in C beats handing each to the transport)."""
        self._flush_scheduled = False
        out = self._out
        if out:
            self._out = []
            transport = self.transport
            if transport is not None and not transport.is_closing():
                transport.write(b"".join(out))

    def _send_now(self, data: bytes) -> None:
        """A connection-level frame (negotiation, close-ok): straight to the socket."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(HIGH_WATER_BYTES, LOW_WATER_BYTES)
        self._send_now(frames.PROTOCOL_HEADER)

    def data_received(self, data: bytes) -> None:
        """HOT PATH: each run of consecutive frames of one channel goes to its receiver as
        ONE span of the read (``LinkChannel.run``), or as (type, payload) pairs."""
        self._received = True
        try:
            src, starts, runs = self.reader.feed(data)
        except errors.AMQPError as error:
            self.fail(f"bad frames from node '{self.node}': {error.reply_text}")
            return
        channels = self.channels
        for k in range(len(runs) - 1):
            number, first = runs[k]
            if number == 0:  # one frame: connection-level
                at = starts[first]
                if src[at] != frames.FRAME_HEARTBEAT:
                    self._connection_frame(src[at], src[at + 7 : starts[first + 1] - 1])
                    if self.failed:
                        return
                continue
            channel = channels.get(number)
            at = starts[first]
            if src[at] == frames.FRAME_METHOD and src[at + 7 : at + 9] == CLASS_CHANNEL:
                self._channel_method(number, src[at + 7 : starts[first + 1] - 1])
            elif channel is not None:  # else a channel we closed: dropped until close-ok
                self._deliver_run(channel, src, starts, first, runs[k + 1][1])
        self.flush()

    def _deliver_run(
        self, channel: LinkChannel, src: bytes, starts: list[int], first: int, stop: int
    ) -> None:
        if channel.closed:
            return
        try:
            if channel.run is not None:
                channel.run(channel, src, starts, first, stop)
            else:
                channel.receiver.link_frames(channel, frames_of(src, starts, first, stop))
        except Exception:  # a receiver's bug must not take the link down
            log.exception("link to node '%s': a channel's receiver failed", self.node)

    def _deliver(self, channel: LinkChannel, run: list[tuple[int, bytes]]) -> None:
        if channel.closed:
            return
        try:
            channel.receiver.link_frames(channel, run)
        except Exception:  # a receiver's bug must not take the link down
            log.exception("link to node '%s': a channel's receiver failed", self.node)

    def _channel_method(self, number: int, payload: bytes) -> None:
        method = hotcodec.method_id(payload)
        if method == _CHANNEL_OPEN_OK:
            return
        if method == CHANNEL_CLOSE_OK:
            self._closing_numbers.discard(number)
            return
        if method == CHANNEL_CLOSE:
            close: Any = codec.decode_method(payload)
            self.send(codec.encode_method(number, spec.Channel.CloseOk()))
            self._closing_numbers.discard(number)
            channel = self.channels.get(number)
            if channel is not None:
                self._fail_channel(channel, int(close.reply_code), str(close.reply_text))
            return
        channel = self.channels.get(number)
        if channel is not None:  # channel.flow and the like: the receiver's business
            self._deliver(channel, [(frames.FRAME_METHOD, payload)])

    def _connection_frame(self, ftype: int, payload: bytes) -> None:
        if ftype != frames.FRAME_METHOD:
            return
        method = hotcodec.method_id(payload)
        if method == _CONNECTION_START:
            self._send_now(codec.encode_method(0, self._start_ok()))
        elif method == _CONNECTION_TUNE:
            tune: Any = codec.decode_method(payload)
            self._tuned(tune)
        elif method == _CONNECTION_OPEN_OK:
            self._opened()
        elif method == _CONNECTION_CLOSE:
            close: Any = codec.decode_method(payload)
            self._send_now(codec.encode_method(0, spec.Connection.CloseOk()))
            self.fail(
                f"node '{self.node}' closed the link: {close.reply_code} {close.reply_text}",
                refused=close.reply_code in (403, 530) and not self.opened,
            )
        elif method == _CONNECTION_CLOSE_OK and self.transport is not None:
            self.transport.close()

    def _start_ok(self) -> Any:
        secret = self.links.secret() or ""
        me = self.links.me
        return spec.Connection.StartOk(
            client_properties={
                "product": PRODUCT,
                "cluster_node": me,
                "capabilities": {"consumer_cancel_notify": True},
            },
            mechanism="PLAIN",
            response=f"\x00{me}\x00{secret}",
            locale="en_US",
        )

    def _tuned(self, tune: Any) -> None:
        self.channel_max = min(int(tune.channel_max or CHANNEL_MAX), CHANNEL_MAX)
        self.frame_max = min(int(tune.frame_max or FRAME_MAX), FRAME_MAX)
        self.reader.frame_max = self.frame_max
        wanted = self.links.heartbeat_s
        heartbeat = min(int(tune.heartbeat or 0), wanted) if tune.heartbeat else 0
        self._heartbeat_s = heartbeat
        self._send_now(
            codec.encode_method(
                0,
                spec.Connection.TuneOk(
                    channel_max=self.channel_max, frame_max=self.frame_max, heartbeat=heartbeat
                ),
            )
        )
        self._send_now(codec.encode_method(0, spec.Connection.Open(virtual_host=self.vhost)))
        if heartbeat:
            self._heartbeat = self.loop.call_later(heartbeat, self._beat)

    def _opened(self) -> None:
        self.opened = True
        self.links.opened(self)
        held, self._held = self._held, []
        self._held_bytes = 0
        self.over = False  # the transport's buffer says from now on (``pause_writing``)
        if held:
            self.send_many(held)
            self.flush()
        if not self.over:
            self._release()

    def _beat(self) -> None:
        """Every interval: a heartbeat out; a peer silent for two intervals is dropped."""
        self._heartbeat = None
        if self.failed or self.transport is None:
            return
        if self._received:
            self._received = False
            self._missed = 0
        else:
            self._missed += 1
            if self._missed >= 2:
                transport = self.transport
                self.fail(f"node '{self.node}' missed two heartbeats")
                transport.abort()
                return
        self._send_now(hotcodec.encode_heartbeat())
        self._heartbeat = self.loop.call_later(self._heartbeat_s, self._beat)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.fail(f"link to node '{self.node}' lost" + (f": {exc}" if exc else ""))

    # ---------------------------------------------------------------- failing

    def fail(self, why: str, refused: bool = False) -> None:
        """The link connection is over: every channel hears ``link_closed`` (code 0)."""
        if self.failed:
            return
        self.failed = True
        if refused:
            log.error("%s", why)
        else:
            log.warning("%s", why)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        self._out.clear()
        self._held.clear()
        self._held_bytes = 0
        self.over = False
        self._release()  # nothing more is buffered: its publishers are nacked, not held
        self.links.failed(self, why)
        for channel in list(self.channels.values()):
            self._fail_channel(channel, 0, why)
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.close()

    def close(self) -> None:
        """Stop using the link (node shutdown): connection.close, channels told."""
        if self.opened and not self.failed:
            self.flush()
            self._send_now(
                codec.encode_method(0, spec.Connection.Close(200, "node stopping", 0, 0))
            )
        self.fail(f"link to node '{self.node}' closed by this node")


class Links:
    """This node's link connections, one per (peer, vhost) in use, opened on demand."""

    def __init__(
        self,
        me: str,
        secret: Callable[[], str | None],
        address_of: Callable[[str], str | None],
        loop: asyncio.AbstractEventLoop | None = None,
        heartbeat_s: int = LINK_HEARTBEAT_S,
    ) -> None:
        self.me = me
        self.heartbeat_s = heartbeat_s  # asked of every peer (``heartbeat_for``)
        self.secret = secret
        self._address_of = address_of  # a live node's cluster address (HOST:PORT), or None
        self.loop = loop or asyncio.get_event_loop()
        self._links: dict[tuple[str, str], LinkConnection] = {}
        # per peer: (the earliest next try, the current backoff, why it failed last)
        self._down: dict[str, tuple[float, float, str]] = {}
        self._started: dict[str, object] = {}  # per peer: its record's ``started`` last seen
        self._tasks: set[asyncio.Future[None]] = set()
        self.closed = False
        # links written to while over their high-water mark since the last ``hold``
        self.pressed: list[LinkConnection] = []

    def hold(self, resume: Callable[[], None]) -> bool:
        """After a client connection's read: did it write to a link over its high-water mark
        (``pressed``)? Then True: it stops reading, and ``resume`` is called once every such
        link is under its low-water mark or failed."""
        pressed = self.pressed
        self.unpress()
        over = {link for link in pressed if link.over and not link.failed}
        if not over:
            return False
        waiter = _Waiter(len(over), resume)
        for link in over:
            link._waiters.append(waiter)
        return True

    def unpress(self) -> None:
        pressed, self.pressed = self.pressed, []
        for link in pressed:
            link._pressing = False

    def describe(self) -> list[dict[str, Any]]:
        """Each open link (``/api/nodes``' ``sievemq.links``): its peer and vhost, bytes
        buffered for it, whether it holds its publishers and how many wait, its channels
        by kind."""
        out = []
        for (node, vhost), link in sorted(self._links.items()):
            kinds = {"pinned": 0, "routed": 0, "relay": 0, "other": 0}
            for channel in link.channels.values():
                kinds[_kind(channel.target)] += 1
            out.append(
                {
                    "node": node,
                    "vhost": vhost,
                    "opened": link.opened,
                    "buffered_bytes": link.buffered,
                    "over_high_water": link.over,
                    "held_connections": sum(w.left > 0 for w in link._waiters),
                    "channels": kinds,
                }
            )
        return out

    def channels_open(self, node: str, vhost: str) -> int:
        """How many channels the link to ``node`` in ``vhost`` has open now."""
        link = self._links.get((node, vhost))
        return 0 if link is None or link.failed else len(link.channels)

    def open_channel(
        self,
        node: str,
        vhost: str,
        receiver: LinkReceiver,
        target: str = "",
        number: int = 0,
        relay: bool = False,
    ) -> LinkChannel:
        """A channel to ``node`` in ``vhost`` (see the module docstring), numbered
        ``number`` when that one is free (a relay whose client channel has the same number
        writes the leader's frames without patching them; with ``relay``, the leader wraps
        them in relay frames); never raises for a peer that cannot be reached: its receiver
        hears ``link_closed`` instead."""
        link = self._links.get((node, vhost))
        if link is None or link.failed:
            link = self._connect(node, vhost)
        return link.open_channel(receiver, target, number, relay)

    def node_gone(self, node: str) -> None:
        """``node``'s etcd record went (its lease ended: killed, frozen, cut off): its links
        fail now instead of after two missed heartbeats (10-15 s by default), so what was
        forwarded to it is nacked at once and the next publishes go where the records say (a
        failover's new leader) or are nacked while it is away."""
        for (name, _vhost), link in list(self._links.items()):
            if name == node and not link.failed:
                link.fail(f"node '{node}' left the cluster (its etcd lease ended)")

    def node_seen(self, node: str, started: object) -> None:
        """``node``'s etcd record was written: when it is a new run of the node (its
        ``started`` changed: restarted), the backoff of failed tries ends, so the next channel
        to it connects at once instead of failing with the old run's error for up to
        ``BACKOFF_MAX_S``."""
        if self._started.get(node) != started:
            self._started[node] = started
            self._down.pop(node, None)

    def why_down(self, node: str) -> str:
        down = self._down.get(node)
        return down[2] if down else f"no link to node '{node}'"

    def _connect(self, node: str, vhost: str) -> LinkConnection:
        link = LinkConnection(self, node, vhost)
        self._links[(node, vhost)] = link
        down = self._down.get(node)
        address = self._address_of(node)
        if self.closed:
            link.failed = True
            self._down[node] = (float("inf"), BACKOFF_MAX_S, "this node is stopping")
        elif down is not None and self.loop.time() < down[0]:
            link.failed = True  # within the backoff: its channels fail at once
        elif address is None:
            link.failed = True
            self._note_down(node, f"node '{node}' is not running (no cluster address)")
        else:
            task = self.loop.create_task(self._open(link, address))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return link

    async def _open(self, link: LinkConnection, address: str) -> None:
        host, _, port = address.rpartition(":")
        try:
            await asyncio.wait_for(
                self.loop.create_connection(lambda: link, host.strip("[]"), int(port)),
                CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError, ValueError) as error:
            link.fail(f"cannot reach node '{link.node}' at {address}: {error}")

    def _note_down(self, node: str, why: str) -> None:
        previous = self._down.get(node)
        backoff = min(previous[1] * 2, BACKOFF_MAX_S) if previous else BACKOFF_FIRST_S
        self._down[node] = (self.loop.time() + backoff, backoff, why)

    def opened(self, link: LinkConnection) -> None:
        self._down.pop(link.node, None)

    def failed(self, link: LinkConnection, why: str) -> None:
        if self._links.get((link.node, link.vhost)) is link:
            del self._links[(link.node, link.vhost)]
        if not self.closed:
            self._note_down(link.node, why)

    async def close(self) -> None:
        """Node shutdown: close every link (their channels hear ``link_closed``)."""
        self.closed = True
        for link in list(self._links.values()):
            link.close()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class _Waiter:
    """A client connection held until ``left`` links drained (``Links.hold``)."""

    __slots__ = ("left", "resume")

    def __init__(self, left: int, resume: Callable[[], None]) -> None:
        self.left = left
        self.resume = resume

    def drained(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.resume()


def _kind(target: str) -> str:
    """A link channel's kind, by its target (``describe``)."""
    if target.startswith(RELAY_TARGET):
        return "relay"
    if target.startswith(ROUTED_TARGET):
        return "routed"
    return "pinned" if target and not target.startswith("\x00") else "other"
