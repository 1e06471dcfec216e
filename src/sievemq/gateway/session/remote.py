"""Consume, get, ack/nack/reject, purge and delete on a queue another cluster node leads.

A client's channel on this node reaches such a queue through the inter-node link
(``model.directory.LinkChannel``): each consumer gets its own link channel to the leader,
where this node sends the client's basic.qos (the consumer's prefetch, so the leader's credit
is the client's) and basic.consume with the same consumer tag and arguments; the leader's
ordinary session code serves it. What comes back is relayed to the client's channel: HOT
PATH, a basic.deliver gets this channel's next delivery tag (one tag space with the local
deliveries, in ``Channel.unacked``) and the client's channel number; header and body frames
pass through as bytes. A run of frames read at once arrives as a span of the read
(``link_run``): one copy, patched in place (channel numbers, delivery tags), one write; a
client whose frame_max is smaller than the link's gets them re-framed (bodies split) by
``link_frames``. Nothing is decoded or re-encoded.

``RemoteDeliveries`` (one per channel) maps the client's ack, nack, reject and recover back
to the link's delivery tags and sends them once per loop turn; a run of acks that leaves
nothing older outstanding goes as ONE ack with multiple=true. A basic.get, queue.purge or
queue.delete goes over a link channel of the channel's per queue (``RemoteOps``). While the
leader answers a consume, get, purge or delete, the client's channel holds its later frames
(``Channel.backlog``, as for a definitions sync) and its reply goes out in order.

A cancel keeps the link channel until the client settled what it had (its unacked can still
be acked, as on a single node); a channel or connection closed closes its link channels, and
the leader requeues what they had unacked. When the leader cancels (its queue was deleted),
the client gets basic.cancel if it asked for consumer_cancel_notify; when the link drops, the
client gets basic.cancel too if it asked, else the channel is closed with 404 naming the node.
"""

from __future__ import annotations

import secrets
import struct
from bisect import bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import pamqp.commands as spec

from sievemq.amqp import codec, errors, hotcodec
from sievemq.amqp.methods import METHOD_ACK, METHOD_NACK
from sievemq.amqp.spans import FRAME_RELAY, RELAY_AT, client_frames, frames_of
from sievemq.gateway.model.directory import LeaderQueue, LinkChannel, Links, StreamReplicas
from sievemq.gateway.session.ports import ChannelHost
from sievemq.storage import FilterSpec, FilterStats

if TYPE_CHECKING:
    from sievemq.gateway.model.stream.queue import StreamQueue

_HEAD = struct.Struct(">BHI")
_END_HEAD = struct.Struct(">BBHI")  # the frame end of the frame before, this one's header
_Q = struct.Struct(">Q")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_HH = struct.Struct(">HH")
_END = b"\xce"

_DELIVER = _HH.pack(60, 60)
_DELIVER_ID = _I.unpack(_DELIVER)[0]
_CONSUME_OK = (60, 21)
_CANCEL = (60, 30)
_CANCEL_OK = (60, 31)
_GET_OK = (60, 71)
_GET_EMPTY = (60, 72)
_PURGE_OK = (50, 31)
_DELETE_OK = (50, 41)
_GET_TAG_AT = 4  # basic.get-ok: the delivery tag follows the class and method ids
_MORE_AT = RELAY_AT - 1  # a relay frame's "the turn goes on" octet
_LAST_AT = 7  # a relay frame's last delivery tag


class Channel(Protocol):
    """What remote queues need of the client's channel (``session.channel.Channel``)."""

    id: int
    connection: ChannelHost
    prefetch: int
    global_prefetch: int
    next_delivery_tag: int
    unacked: dict[int, Any]
    consumers: dict[str, Any]
    remote: RemoteDeliveries | None
    backlog: list[tuple[int, bytes]] | None

    @property
    def closing(self) -> bool: ...
    def cancel_consumer_by_server(self, consumer: Any) -> None: ...
    def close_by_server(self, error: errors.AMQPError) -> None: ...


class RelayedError(errors.AMQPError):
    """The leader closed the link channel: the client's channel closes with its reply (its
    connection, for a connection-level code the leader's session raised for the forwarded
    method, as a single node would)."""

    def __init__(self, code: int, text: str, class_id: int, method_id: int) -> None:
        super().__init__(text, class_id, method_id)
        self.reply_code = code
        self.closes_connection = code >= 500 and code != errors.ChannelResourceError.reply_code
        self._text = text

    @property
    def reply_text(self) -> str:
        return self._text


def link_lost_error(queue: LeaderQueue, reason: str) -> errors.NotFound:
    """404 naming the node, as RabbitMQ's "home node ... is down or inaccessible"."""
    return errors.NotFound(
        f"queue '{queue.name}' in vhost '{queue.vhost}': the link to its leader, cluster "
        f"node '{queue.leader}', was lost ({reason})"
    )


Release = Callable[[Callable[[], None] | BaseException], None]


def hold(channel: Channel) -> Release:
    """Hold the channel's later frames until the leader answered; the returned function
    runs what the answer does (or fails the channel with an error), then handles them."""
    channel.backlog = []

    def release(work: Callable[[], None] | BaseException) -> None:
        backlog, channel.backlog = channel.backlog or [], None
        channel.connection.resume_held(channel, work, backlog)

    return release


class RemoteDeliveries:
    """The link users of one channel (its remote consumers and ``RemoteOps``) and the
    settling of their deliveries."""

    __slots__ = ("channel", "direct", "ops", "users")

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.users: list[LinkUser] = []
        self.ops: dict[str, RemoteOps] = {}  # per queue name
        # the channel's only source of deliveries, whose tags are the leader's (``direct``)
        self.direct: RemoteConsumer | None = None

    def leave_direct(self) -> None:
        """Another source of deliveries comes to the channel (a consume, a get): from now on
        the direct consumer's deliveries are numbered by this channel too."""
        direct = self.direct
        if direct is not None:
            direct.leave_direct()

    def settle(self, tag: int, multiple: bool, finished: bool, method_id: int) -> None:
        """The client settled ``tag`` (and, with ``multiple``, every tag before it; 0: all):
        the remote ones go back to their link channels."""
        for user in list(self.users):
            out = user.out
            if not out:
                continue
            if not multiple:
                link_tag = out.pop(tag, None)
                if link_tag is None:
                    continue
                user.settle(link_tag, False, finished, method_id)
                return
            keys = list(out)
            n = bisect_right(keys, tag) if tag else len(keys)
            if not n:
                continue
            last = out[keys[n - 1]]
            for key in keys[:n]:
                del out[key]
            user.settle(last, True, finished, method_id)

    def release(self) -> None:
        """The channel closed: every link channel closes (the leader requeues)."""
        self.direct = None
        for user in self.users:
            user.out.clear()
            user.close_link()
        self.users.clear()
        self.ops.clear()


def deliveries_of(channel: Channel) -> RemoteDeliveries:
    got = channel.remote
    if got is None:
        got = channel.remote = RemoteDeliveries(channel)
    return got


class LinkUser:
    """One link channel of a client channel: its outstanding deliveries (client tag ->
    link tag, in order) and the settles it sends once per loop turn."""

    tracker = None
    direct = False  # a consumer whose tags are the leader's (``RemoteConsumer``)

    def __init__(self, channel: Channel, queue: LeaderQueue) -> None:
        self.channel = channel
        self.queue = queue
        self.link: LinkChannel | None = None
        self.out: dict[int, int] = {}
        self._settles: list[tuple[int, bool, bool, int]] = []
        self._scheduled = False
        self._waiting: Release | None = None  # the held channel, while an answer is due

    # ---------------------------------------------------------------- what unacked sees

    def give_credit(self, n: int) -> None:
        return None  # the leader keeps the credit: it gets the settle

    def count_acks(self, n: int) -> None:
        return None  # the leader counts them

    # ---------------------------------------------------------------- writing

    def settle(self, link_tag: int, multiple: bool, finished: bool, method_id: int) -> None:
        self._settles.append((link_tag, multiple, finished, method_id))
        if not self._scheduled:
            self._scheduled = True
            self.channel.connection.node.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send the settles of this turn: one multiple ack when they are all acks and
        nothing older is outstanding (direct: when they are all multiple acks), else one
        frame each."""
        self._scheduled = False
        settles, self._settles = self._settles, []
        link = self.link
        if link is None or not settles:
            return
        number = link.number
        acks = all(f and m == METHOD_ACK for _, _, f, m in settles)
        if self.direct:
            one = acks and all(multi for _, multi, _, _ in settles)
            tags = [t for t, _, _, _ in settles]
            top = 0 if 0 in tags else max(tags)
        else:
            first_out = next(iter(self.out.values()), None)
            top = max(s[0] for s in settles)
            one = acks and (first_out is None or first_out > top)
        if one:
            link.write(hotcodec.encode_basic_ack(number, top, True))
        else:
            link.write(
                b"".join(
                    hotcodec.encode_basic_ack(number, t, multi)
                    if finished and method == METHOD_ACK
                    else hotcodec.encode_basic_nack(number, t, multi, not finished)
                    for t, multi, finished, method in settles
                )
            )
        self.after_settle()

    def after_settle(self) -> None:
        """A consumer cancelled by the client closes its link channel once settled."""

    def retag(self, out: list[bytes], payload: bytes, at: int, no_ack: bool) -> None:
        """HOT PATH: a basic.deliver or get-ok for the client's channel: its next delivery
        tag in place of the link's (at ``at``), outstanding until settled unless no_ack."""
        channel = self.channel
        tag = channel.next_delivery_tag
        channel.next_delivery_tag = tag + 1
        if not no_ack:
            self.out[tag] = _Q.unpack_from(payload, at)[0]
            channel.unacked[tag] = self
        out += (
            _HEAD.pack(1, channel.id, len(payload)),
            payload[:at],
            _Q.pack(tag),
            payload[at + 8 :],
            _END,
        )

    def send(self, method: Any) -> None:
        """A method on the link channel, after this turn's settles."""
        if self._settles:
            self.flush()
        if self.link is not None:
            self.link.write(codec.encode_method(self.link.number, method))

    def close_link(self) -> None:
        if self._settles:
            self.flush()
        link, self.link = self.link, None
        if link is not None:
            link.close()

    def answered(self, work: Callable[[], None] | BaseException) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting(work)

    def link_closed(self, channel: LinkChannel, code: int, text: str) -> None:
        """The leader closed the link channel (``code``: its reply), or the link dropped
        (code 0): what was outstanding is the leader's to requeue, and the client's
        settles of it are ignored."""
        self.link = None
        self.out.clear()
        self._settles.clear()
        if code:
            self.closed(RelayedError(code, text, 0, 0))
        else:
            self.closed(link_lost_error(self.queue, text))

    def closed(self, error: errors.AMQPError) -> None:
        """What the end of the link channel means to the client."""


def _reframe(out: list[bytes], ftype: int, chid: int, payload: bytes, limit: int) -> None:
    """A header or body frame for the client's channel; a body larger than the client's
    frame_max allows is split (a header cannot be: ``HeaderTooLarge``)."""
    size = len(payload)
    if size <= limit:
        out += (_HEAD.pack(ftype, chid, size), payload, _END)
        return
    if ftype != 3:
        raise hotcodec.HeaderTooLarge(size + 8, limit + 8)
    for start in range(0, size, limit):
        piece = payload[start : start + limit]
        out += (_HEAD.pack(3, chid, len(piece)), piece, _END)


class RemoteConsumer(LinkUser):
    """One basic.consume on a queue another node leads (a ``ports.ChannelConsumer``)."""

    spec: FilterSpec | None = None
    consumer_name: str | None = None
    sql_text: str | None = None
    position = 0

    def __init__(
        self, channel: Channel, tag: str, queue: LeaderQueue, prefetch: int, no_ack: bool
    ) -> None:
        super().__init__(channel, queue)
        self.tag = tag
        self.prefetch = prefetch
        self.credit = prefetch
        self.no_ack = no_ack
        self.active = True
        self.delivered = 0
        ctag = hotcodec.encode_shortstr(tag)
        self._tag_at = 4 + len(ctag)  # basic.deliver: class and method ids, consumer tag
        # the frame end before, the frame header, the method's ids and consumer tag, the tag
        self._deliver_head = struct.Struct(f">BBHI{self._tag_at}sQ")
        self._deliver_prefix = _DELIVER + ctag
        self._cancel_sent = False
        self._nowait = False
        # direct: the leader's relay frames pass to the client as they came (its channel
        # number and delivery tags are the client's); the client's settles go as sent.
        # What the client holds: the tags after ``acked_upto`` up to ``high`` (the last one
        # written to it) but ``singles`` (settled one by one)
        self.direct = False
        self.high = 0
        self.acked_upto = 0
        self.singles: set[int] = set()
        self._pending: list[bytes] = []  # the pieces of a relayed turn not complete yet

    # ---------------------------------------------------------------- ConsumerInfo

    @property
    def connection_id(self) -> int:
        return self.channel.connection.id

    @property
    def channel_id(self) -> int:
        return self.channel.id

    def filter_stats(self) -> FilterStats:
        return FilterStats(messages_delivered=self.delivered)

    def cancel_by_server(self) -> None:
        self.channel.cancel_consumer_by_server(self)

    def wake(self) -> None:
        return None  # the leader delivers

    # ---------------------------------------------------------------- the link's frames

    def link_frames(self, link: LinkChannel, frames: list[tuple[int, bytes]]) -> None:
        """HOT PATH: relay one read's frames of this consumer's link channel as ONE write.

        Per frame one struct pack: the frame-end octet of the frame before, and this
        frame's header for the client's channel (a delivery's also carries the method's
        ids, the consumer tag and the client's delivery tag); the payloads pass as bytes."""
        channel = self.channel
        if not self.active or channel.closing:
            return self._after_cancel(frames)
        chid = channel.id
        limit = channel.connection.frame_max - 8
        frame_head = _END_HEAD.pack
        deliver_head = self._deliver_head.pack
        prefix = self._deliver_prefix
        link_tag = _Q.unpack_from
        at = self._tag_at
        rest = at + 8
        owed = self.out
        unacked = channel.unacked
        track = not self.no_ack
        tag = first = channel.next_delivery_tag
        out: list[bytes] = []
        for ftype, payload in frames:
            size = len(payload)
            if ftype == 1:
                if payload[:4] != _DELIVER:
                    channel.next_delivery_tag = tag
                    self._write(out)
                    out = []
                    self._method(payload)
                    if not self.active or channel.closing:
                        return None
                    tag = channel.next_delivery_tag
                    continue
                if track:
                    owed[tag] = link_tag(payload, at)[0]
                    unacked[tag] = self
                out += (deliver_head(0xCE, 1, chid, size, prefix, tag), payload[rest:])
                tag += 1
            elif size <= limit:
                out += (frame_head(0xCE, ftype, chid, size), payload)
            elif ftype == 3:  # a body larger than the client's frame_max: split
                for begin in range(0, size, limit):
                    piece = payload[begin : begin + limit]
                    out += (frame_head(0xCE, 3, chid, len(piece)), piece)
            else:
                channel.next_delivery_tag = tag
                error = hotcodec.HeaderTooLarge(size + 8, limit + 8)
                channel.close_by_server(errors.PreconditionFailed(f"consumer {self.tag}: {error}"))
                return None
        channel.next_delivery_tag = tag
        self.delivered += tag - first
        self._write(out)
        return None

    def link_run(
        self, link: LinkChannel, src: bytes, starts: list[int], first: int, stop: int
    ) -> None:
        """HOT PATH: the same relay for a run of frames that arrived as one span of the
        link's read (``amqp/spans.py``): ONE copy of the span, in which each frame's
        channel number (none when the link channel's is the client's) and each delivery's tag
        are patched in place, written in one call.
        The consumer tag is the client's already (the link consumes with it). A run that
        may need a body split (the client's frame_max is smaller than the link's), or that
        arrives after a cancel, takes ``link_frames``."""
        channel = self.channel
        if link.relay:
            if self.direct and self.active and not channel.closing:
                return self._pass(link, src, starts, first, stop)
            return self.link_frames(link, self._unwrap(frames_of(src, starts, first, stop)))
        if not self.active or channel.closing or channel.connection.frame_max < link.frame_max:
            return self.link_frames(link, frames_of(src, starts, first, stop))
        base = starts[first]
        buf = bytearray(memoryview(src)[base : starts[stop]])
        chid = channel.id
        put_channel = _H.pack_into
        method_id = _I.unpack_from
        link_tag = _Q.unpack_from
        put_tag = _Q.pack_into
        at = 7 + self._tag_at
        owed = self.out
        unacked = channel.unacked
        track = not self.no_ack
        tag = channel.next_delivery_tag
        patch = chid != link.number  # else the link channel is numbered as the client's
        delivered = 0
        done = 0  # bytes of buf written (up to a method relayed on its own)
        for i in range(first, stop):
            o = starts[i] - base
            if patch:
                put_channel(buf, o + 1, chid)
            if buf[o] != 1:
                continue
            if method_id(buf, o + 7)[0] != _DELIVER_ID:
                channel.next_delivery_tag = tag
                if o > done:
                    channel.connection.write_joined(bytes(buf[done:o]))
                done = starts[i + 1] - base
                self._method(bytes(buf[o + 7 : done - 1]))
                if not self.active or channel.closing:
                    self.delivered += delivered
                    return None
                tag = channel.next_delivery_tag
                continue
            if track:
                owed[tag] = link_tag(buf, o + at)[0]
                unacked[tag] = self
            put_tag(buf, o + at, tag)
            tag += 1
            delivered += 1
        channel.next_delivery_tag = tag
        self.delivered += delivered
        if done < len(buf):
            channel.connection.write_joined(bytes(buf) if not done else bytes(buf[done:]))
        return None

    def _pass(
        self, link: LinkChannel, src: bytes, starts: list[int], first: int, stop: int
    ) -> None:
        """HOT PATH (direct): each relayed turn is written as it came, with no walk of its
        frames; only the last tag it carries is kept. A method (consume-ok, cancel...) is
        handled in order; a plain delivery (none from a SieveMQ leader) passes with only its
        channel number patched."""
        out: list[bytes] = []
        pending = self._pending
        high = self.high
        for i in range(first, stop):
            o = starts[i]
            end = starts[i + 1] - 1
            ftype = src[o]
            if ftype == FRAME_RELAY:
                if src[o + _MORE_AT]:
                    pending.append(src[o + RELAY_AT : end])
                    continue
                if pending:
                    pending.append(src[o + RELAY_AT : end])
                    out.append(b"".join(pending))
                    pending.clear()
                else:
                    out.append(src[o + RELAY_AT : end])
                high = _Q.unpack_from(src, o + _LAST_AT)[0]
                continue
            if ftype == 1:
                if src[o + 7 : o + 11] != _DELIVER:
                    self._passed(out, high)
                    out = []
                    self._method(src[o + 7 : end])
                    if not self.direct or not self.active or self.channel.closing:
                        rest = self._unwrap(frames_of(src, starts, i + 1, stop))
                        return self.link_frames(link, rest)
                    high = self.high
                    continue
                high = _Q.unpack_from(src, o + 7 + self._tag_at)[0]
            frame = src[o : end + 1]
            if link.number != self.channel.id:
                patched = bytearray(frame)
                _H.pack_into(patched, 1, self.channel.id)
                frame = bytes(patched)
            out.append(frame)
        self._passed(out, high)
        return None

    def _passed(self, out: list[bytes], high: int) -> None:
        if out:
            self.delivered += high - self.high
            self.high = high
            write = self.channel.connection.write_joined
            write(out[0] if len(out) == 1 else b"".join(out))

    def _unwrap(self, got: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        """Relay frames as the client frames in them (a turn split over several frames is
        kept until its last): the slow path, after the relay stopped being direct."""
        if not any(ftype == FRAME_RELAY for ftype, _ in got):
            return got
        out: list[tuple[int, bytes]] = []
        for ftype, payload in got:
            if ftype != FRAME_RELAY:
                out.append((ftype, payload))
                continue
            self._pending.append(payload[RELAY_AT - 7 :])
            if payload[_MORE_AT - 7]:
                continue
            data = b"".join(self._pending)
            self._pending.clear()
            out += client_frames(data)
        return out

    # ---------------------------------------------------------------- direct settles

    def settle_direct(self, tag: int, multiple: bool, finished: bool, method_id: int) -> None:
        """The client settled ``tag`` (its tags are the leader's): to the link as it is; the
        leader answers an unknown tag (406, which closes the client's channel)."""
        if multiple:
            top = tag or self.high
            if top > self.acked_upto:
                self.acked_upto = top
                if self.singles:
                    self.singles = {t for t in self.singles if t > top}
        elif tag == self.acked_upto + 1:
            upto = tag
            singles = self.singles
            while upto + 1 in singles:
                upto += 1
                singles.discard(upto)
            self.acked_upto = upto
        elif tag > self.acked_upto:
            self.singles.add(tag)
        self.settle(tag, multiple, finished, method_id)

    def owes(self) -> bool:
        """Whether the client holds deliveries of this consumer not settled yet."""
        if self.no_ack:
            return False
        if self.direct:
            return self.high > self.acked_upto + len(self.singles)
        return bool(self.out)

    def leave_direct(self) -> None:
        """From now on this channel numbers the deliveries (another source came, or the
        link ended): what the client holds is recorded as every remote delivery is."""
        if not self.direct:
            return
        if self._settles:
            self.flush()
        self.direct = False
        channel = self.channel
        remote = channel.remote
        if remote is not None and remote.direct is self:
            remote.direct = None
        singles, self.singles = self.singles, set()
        start = self.high + 1 if self.no_ack else self.acked_upto + 1
        held = [t for t in range(start, self.high + 1) if t not in singles]
        self.out.update(zip(held, held, strict=True))
        channel.unacked.update(dict.fromkeys(held, self))
        channel.next_delivery_tag = max(channel.next_delivery_tag, self.high + 1)

    def _write(self, out: list[bytes]) -> None:
        """The pieces of whole frames, each header led by the frame end of the one before:
        the first's is dropped, the last frame's added."""
        if out:
            out[0] = out[0][1:]
            out.append(_END)
            self.channel.connection.write_joined(b"".join(out))

    def _after_cancel(self, frames: list[tuple[int, bytes]]) -> None:
        """Deliveries that crossed the client's cancel (or channel close): back to the
        queue, never shown; the leader's answers are still read."""
        for ftype, payload in frames:
            if ftype != 1:
                continue
            if payload[:4] == _DELIVER:
                self.settle(_Q.unpack_from(payload, self._tag_at)[0], False, False, METHOD_NACK)
            else:
                self._method(payload)

    def _method(self, payload: bytes) -> None:
        method = hotcodec.method_id(payload)
        if method == _CONSUME_OK:
            nowait, tag = self._nowait, self.tag
            conn = self.channel.connection
            chid = self.channel.id
            self.answered(
                lambda: (
                    None
                    if nowait
                    else conn.send_method(chid, spec.Basic.ConsumeOk(consumer_tag=tag))
                )
            )
        elif method == _CANCEL:  # the leader's queue was deleted
            self._cancel_sent = True  # (nothing to cancel there any more)
            if self.active:
                self.channel.cancel_consumer_by_server(self)
        elif method == _CANCEL_OK:
            self.after_settle()
        # basic.qos-ok and anything else: the answers to what we sent

    def link_closed(self, channel: LinkChannel, code: int, text: str) -> None:
        self.leave_direct()  # the client's later settles of what it holds are ignored
        self._pending.clear()
        super().link_closed(channel, code, text)

    def closed(self, error: errors.AMQPError) -> None:
        """A consume the leader refused fails the client's consume with its reply; a
        consumer whose link dropped is cancelled (basic.cancel, when the client asked for
        those) or its channel is closed with 404 naming the node."""
        if self._waiting is not None:
            self._forget()
            self.answered(error)
            return
        if not self.active or self.channel.closing:
            return
        if isinstance(error, RelayedError) or not self.channel.connection.cancel_notify:
            self.channel.close_by_server(error)
        else:
            self.channel.cancel_consumer_by_server(self)

    def _forget(self) -> None:
        """The consume failed: the channel never had this consumer."""
        self.active = False
        if self.channel.consumers.get(self.tag) is self:
            del self.channel.consumers[self.tag]
        self.queue.consumers.discard(self)

    # ---------------------------------------------------------------- stopping

    def stop(self) -> None:
        """Cancelled (by the client or the server) or its channel closes: the leader stops
        delivering; the link channel closes once what was delivered is settled."""
        if not self.active:
            return
        self.active = False
        if not self._cancel_sent and self.link is not None and self.owes():
            self._cancel_sent = True
            self.send(spec.Basic.Cancel(consumer_tag=self.tag, nowait=True))
            return
        self.after_settle()

    def after_settle(self) -> None:
        if not self.active and not self._settles and not self.owes():
            self.leave_direct()
            self.close_link()
            remote = self.channel.remote
            if remote is not None and self in remote.users:
                remote.users.remove(self)


class RemoteOps(LinkUser):
    """basic.get, queue.purge and queue.delete of one queue through one link channel of
    the client's channel (one answer awaited at a time: the channel holds meanwhile)."""

    def __init__(self, channel: Channel, queue: LeaderQueue) -> None:
        super().__init__(channel, queue)
        self._no_ack = False
        self._nowait = False
        self._reply: list[bytes] = []
        self._body_left = -1  # body bytes of the get-ok still to come; -1: no header yet

    def ask(self, method: Any, no_ack: bool = False, nowait: bool = False) -> None:
        self._no_ack, self._nowait = no_ack, nowait
        self._reply = []
        self._body_left = -1
        self.send(method)
        self._waiting = hold(self.channel)

    def link_frames(self, link: LinkChannel, frames: list[tuple[int, bytes]]) -> None:
        channel = self.channel
        chid = channel.id
        limit = channel.connection.frame_max - 8
        reply = self._reply
        for ftype, payload in frames:
            if ftype == 1:
                method = hotcodec.method_id(payload)
                if method == _GET_OK:
                    self.retag(reply, payload, _GET_TAG_AT, self._no_ack)
                    continue
                if method in (_GET_EMPTY, _PURGE_OK, _DELETE_OK):
                    if not self._nowait:
                        reply += (_HEAD.pack(1, chid, len(payload)), payload, _END)
                    self._answer()
                continue
            try:
                _reframe(reply, ftype, chid, payload, limit)
            except hotcodec.HeaderTooLarge as error:
                self.answered(errors.PreconditionFailed(f"basic.get: {error}"))
                return
            if ftype == 2:
                self._body_left = _Q.unpack_from(payload, 4)[0]
            else:
                self._body_left -= len(payload)
            if not self._body_left:
                self._answer()

    def _answer(self) -> None:
        reply, self._reply = self._reply, []
        conn = self.channel.connection
        self.answered(lambda: conn.write_frames(reply) if reply else None)

    def closed(self, error: errors.AMQPError) -> None:
        remote = self.channel.remote
        if remote is not None:
            if remote.ops.get(self.queue.name) is self:
                del remote.ops[self.queue.name]
            if self in remote.users:
                remote.users.remove(self)
        self.answered(error)


# ---------------------------------------------------------------------------- methods


def local_copy(
    directory: StreamReplicas, vhost: str, name: str, arguments: dict[str, Any] | None
) -> StreamQueue | None:
    """This node's replica of stream ``name`` when a consume of it reads here rather than
    through the leader (RabbitMQ's consumers read their node's member): every consumer but a
    named one (``x-stream-consumer-name``), whose one-writer-per-name rule, offset commits
    and SQL subscription are the leader's, so it goes to the leader as before."""
    if arguments and "x-stream-consumer-name" in arguments:
        return None
    return directory.replica_queue(vhost, name)


def consume(channel: Channel, directory: Links, leader: str, m: Any) -> None:
    """basic.consume of a queue ``leader`` leads: the same consume on a link channel."""
    tag = m.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
    if tag in channel.consumers:
        raise errors.NotAllowed(f"attempt to reuse consumer tag '{tag}'")
    vhost = channel.connection.vhost_name
    queue = LeaderQueue(vhost, m.queue, leader)
    consumer = RemoteConsumer(channel, tag, queue, channel.prefetch, bool(m.no_ack))
    remote = deliveries_of(channel)
    remote.leave_direct()
    # the channel's first source of deliveries: the leader's tags can be the client's
    fresh = channel.next_delivery_tag == 1 and not channel.unacked and not remote.users
    link = consumer.link = directory.open_link(vhost, m.queue, consumer, channel.id, fresh)
    if link.relay and channel.connection.frame_max >= link.frame_max:
        consumer.direct = True
        remote.direct = consumer
    consumer._nowait = bool(m.nowait)
    remote.users.append(consumer)
    channel.consumers[tag] = consumer
    queue.consumers.add(consumer)
    if channel.prefetch:
        consumer.send(spec.Basic.Qos(prefetch_count=channel.prefetch))
    if channel.global_prefetch:
        consumer.send(spec.Basic.Qos(prefetch_count=channel.global_prefetch, global_=True))
    consumer.send(
        spec.Basic.Consume(
            queue=m.queue,
            consumer_tag=tag,
            no_local=bool(m.no_local),
            no_ack=bool(m.no_ack),
            exclusive=bool(m.exclusive),
            arguments=dict(m.arguments or {}),
        )
    )
    consumer._waiting = hold(channel)


def _ops(channel: Channel, directory: Links, leader: str, name: str) -> RemoteOps:
    remote = deliveries_of(channel)
    ops = remote.ops.get(name)
    if ops is None or ops.link is None:
        vhost = channel.connection.vhost_name
        ops = RemoteOps(channel, LeaderQueue(vhost, name, leader))
        ops.link = directory.open_link(vhost, name, ops)
        remote.ops[name] = ops
        remote.users.append(ops)
    return ops


def get(channel: Channel, directory: Links, leader: str, m: Any) -> None:
    """basic.get through the leader: get-ok (the tag is this channel's) or get-empty."""
    deliveries_of(channel).leave_direct()
    _ops(channel, directory, leader, m.queue).ask(
        spec.Basic.Get(queue=m.queue, no_ack=bool(m.no_ack)), no_ack=bool(m.no_ack)
    )


def purge(channel: Channel, directory: Links, leader: str, m: Any) -> None:
    _ops(channel, directory, leader, m.queue).ask(
        spec.Queue.Purge(queue=m.queue), nowait=bool(m.nowait)
    )


def delete(channel: Channel, directory: Links, leader: str, m: Any) -> None:
    """queue.delete of a queue another node leads: deleted on its leader."""
    _ops(channel, directory, leader, m.queue).ask(
        spec.Queue.Delete(queue=m.queue, if_unused=bool(m.if_unused), if_empty=bool(m.if_empty)),
        nowait=bool(m.nowait),
    )
