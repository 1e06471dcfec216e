"""Publishes routed to a queue another node leads: forwarded over the link, confirmed there.

A channel routes a publish as on a single node; a queue name this node does not hold but
another node leads resolves to a ``ForwardedQueue`` (``Placement.remote_queue``), which the
channel submits to exactly as to a local queue's appender. The forwarded queue holds one link
channel to the leader (``cluster/link.py``), pinned to the queue and in confirm mode:

- every message becomes a basic.publish with the exchange and routing key as published
  (the leader stores it into the pinned queue: routing was done here), its property bytes
  as received and its body: nothing is decoded again;
- what a turn forwards to one leader goes out in ONE write (the link connection's), and
  publishes are pipelined: nothing waits for a confirm;
- the leader confirms in runs (basic.ack multiple); each run settles the client channels'
  sequence numbers at once, so a client's confirm goes out only once every target queue,
  local or remote, reported (``ConfirmTracker``);
- a nack from the leader nacks those messages; a lost link (or a link channel the leader
  closed) nacks every message forwarded and not confirmed yet. The next publish opens a
  new link channel (after the link's backoff, while the leader stays away);
- the queue's etcd record naming another leader (a failover: the old one may be cut from
  this node and its replicas, its lease holding) nacks at once what was forwarded to the
  old leader and not confirmed, on the shared channel and on every client channel's raw
  one (``leader_moved``): its answers may never come (the link would only fail once its
  heartbeats did), and the publishers resend, through the records, to the new leader. A
  message so nacked that the old leader still stored is a duplicate (at least once); one
  it confirmed after the nack is dropped here, never confirmed to the client.

Publisher dedup headers travel with the properties and the leader deduplicates as for its
own clients.
"""

from __future__ import annotations

import logging
import struct
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import pamqp.commands as spec

from sievemq.amqp import frames, hotcodec
from sievemq.amqp.methods import BASIC_PUBLISH, CLASS_BASIC, METHOD_ACK, METHOD_NACK
from sievemq.cluster.link import LinkChannel, Links
from sievemq.gateway.model.remote import ROUTED_TARGET, PublishSink, RawSink
from sievemq.gateway.session import publish_cache
from sievemq.storage import Message

log = logging.getLogger("sievemq.cluster")

_METHOD_HEAD = struct.Struct(">BHIHH")
_CONTENT_HEAD = struct.Struct(">BHIHHQ").pack  # frame head + class + weight + body size
_BODY_HEAD = struct.Struct(">BHI").pack
_NO_TICKET: Final = b"\x00\x00"
_NOT_MANDATORY: Final = b"\x00" + frames.FRAME_END_BYTE
_END: Final = frames.FRAME_END_BYTE
_METHODS_MAX: Final = 1024
# a client channel gets a raw link channel of its own while the link has fewer open than
# this (of its 2,047); past it, its publishes take the shared pinned channel
_RAW_CHANNELS_MAX: Final = 1024
_encode_content = hotcodec.encode_content
_FRAME_HEADER: Final = frames.FRAME_HEADER
_FRAME_BODY: Final = frames.FRAME_BODY
_filter_mark = publish_cache.filter_mark
_MARK_NONE: Final = publish_cache.MARK_NONE


class NackLog:
    """The warning that forwarded publishes were nacked, at most once per queue every
    ``every_s`` seconds, with how many were nacked since the last line: a node cut off from
    a leader nacks each publish as its link channel fails, and one line per nack flooded
    the logs (a chaos run: about 150,000 lines in two minutes)."""

    def __init__(self, every_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._queues: dict[tuple[str, str], list[Any]] = {}  # -> [logged at, nacked since]

    def nacked(self, vhost: str, name: str, leader: str, count: int, why: str) -> bool:
        """``count`` publishes to the queue were nacked; True when a line was logged."""
        now = self._clock()
        entry = self._queues.get((vhost, name))
        if entry is not None and now - entry[0] < self.every_s:
            entry[1] += count
            return False
        if len(self._queues) >= _NACK_LOG_MAX:
            self._queues = {k: v for k, v in self._queues.items() if now - v[0] < self.every_s}
        since = 0 if entry is None else entry[1]
        self._queues[(vhost, name)] = [now, 0]
        log.warning(
            "publishes to queue '%s' in vhost '%s' forwarded to node '%s' are nacked: %s "
            "(%d now%s)",
            name,
            vhost,
            leader,
            why,
            count,
            f", {since} more since the last such line" if since else "",
        )
        return True


_NACK_LOG_MAX: Final = 10_000
NACK_LOG = NackLog()


class ForwardedQueue:
    """A queue led by ``leader``, as this node's channels publish to it (a ``RemoteQueue``).

    What is forwarded and not confirmed yet is kept as runs, oldest first: ``[sink, first
    seq, count]`` for consecutive publishes of one client channel with consecutive sequence
    numbers (a confirming publisher's are), so a confirm of a run of N costs one
    ``settle_confirms``, not N entries. The leader releases confirms in order (its
    ``ConfirmTracker``): a confirm covers the oldest ones outstanding.
    """

    __slots__ = (
        "__weakref__",
        "_body_max",
        "_channel",
        "_first",
        "_links",
        "_methods",
        "_next",
        "_pin",
        "_raws",
        "_retired",
        "_runs",
        "leader",
        "name",
        "vhost",
    )

    def __init__(self, links: Links, vhost: str, name: str, leader: str) -> None:
        self._links = links
        self.vhost = vhost
        self.name = name
        self.leader = leader
        self._pin = name  # the link channel's target: the queue its publishes go to
        self._channel: LinkChannel | None = None
        self._runs: deque[list[Any]] = deque()  # [sink, first seq, count], oldest first
        self._first = 1  # the link seq of the oldest publish not confirmed
        self._next = 1  # the link seq of the next publish
        self._methods: dict[tuple[str, str], bytes] = {}  # basic.publish frames, this channel
        self._body_max = 0  # the largest body sent as one frame on this channel
        self._retired = False
        # the client channels' raw forwards opened from this queue (``open_raw``): nacked
        # with it when its leader moves
        self._raws: weakref.WeakSet[RawForward] = weakref.WeakSet()

    @property
    def unconfirmed(self) -> int:
        return self._next - self._first

    # ---------------------------------------------------------------- publishing (hot)

    def submit(self, message: Message, sink: PublishSink | None, seq: int) -> None:
        channel = self._channel
        if channel is None:
            channel = self._open()
        self._track(sink, seq)
        values, exchange, routing_key, props, body, _ = message
        method = self._methods.get((exchange, routing_key))
        if method is None:
            method = self._publish_frame(channel.number, exchange, routing_key)
        size = len(body)
        number = channel.number
        if size <= self._body_max:
            channel.writelines(
                (
                    method,
                    _CONTENT_HEAD(
                        _FRAME_HEADER,
                        number,
                        12 + len(props),
                        CLASS_BASIC,
                        _filter_mark(props, values) if values else _MARK_NONE,
                        size,
                    ),
                    props,
                    _END,
                    _BODY_HEAD(_FRAME_BODY, number, size),
                    body,
                    _END,
                )
            )
        else:  # empty, or more than one body frame
            channel.writelines(_encode_content([method], number, props, body, channel.frame_max))

    def _track(self, sink: PublishSink | None, seq: int) -> None:
        """One more publish outstanding on the link channel (its runs, see the class)."""
        self._next += 1
        runs = self._runs
        if runs:
            last = runs[-1]
            if last[0] is sink and (sink is None or last[1] + last[2] == seq):
                last[2] += 1
                return
        runs.append([sink, seq, 1])

    def open_raw(
        self, sink: RawSink, exchange: str, routing_key: str, queues: int = 1
    ) -> RawForward | None:
        """A link channel of its own for one client channel whose publishes of
        (``exchange``, ``routing_key``) all route to this queue (``RawForward``), or to
        ``queues`` queues ``leader`` leads, this one among them, or by the headers of each
        message (``queues`` 0) to queues it leads (the leader routes them:
        ``ROUTED_TARGET``); None once this queue is retired (its leader changed: route
        again), or while the link has ``_RAW_CHANNELS_MAX`` channels open (the publishes go
        the ordinary way)."""
        if self._retired or self._links.channels_open(self.leader, self.vhost) >= _RAW_CHANNELS_MAX:
            return None  # (the link keeps channels for consumers and this shared one)
        raw = RawForward(
            self._links, self.vhost, self.name, self.leader, sink, exchange, routing_key
        )
        if queues != 1:  # several, or 0: by headers (the leader routes them)
            raw._pin = f"{ROUTED_TARGET}{queues}"
        self._raws.add(raw)
        return raw

    def _publish_frame(self, number: int, exchange: str, routing_key: str) -> bytes:
        ex = hotcodec.encode_shortstr(exchange)
        rk = hotcodec.encode_shortstr(routing_key)
        size = 4 + 2 + len(ex) + len(rk) + 1
        frame = b"".join(
            (
                _METHOD_HEAD.pack(frames.FRAME_METHOD, number, size, *BASIC_PUBLISH),
                _NO_TICKET,
                ex,
                rk,
                _NOT_MANDATORY,
            )
        )
        if len(self._methods) >= _METHODS_MAX:
            self._methods.clear()
        self._methods[(exchange, routing_key)] = frame
        return frame

    def _open(self) -> LinkChannel:
        channel = self._links.open_channel(self.leader, self.vhost, self, target=self._pin)
        channel.send_method(spec.Confirm.Select())
        self._channel = channel
        self._methods.clear()  # framed for the old channel's number
        self._body_max = channel.frame_max - frames.FRAME_OVERHEAD
        self._first = self._next = 1  # a new channel numbers its publishes from 1
        return channel

    # ---------------------------------------------------------------- the leader's answers

    def link_frames(self, channel: LinkChannel, got: list[tuple[int, bytes]]) -> None:
        if channel is not self._channel:
            return
        for ftype, payload in got:
            if ftype != frames.FRAME_METHOD or channel is not self._channel:
                continue
            class_id, method_id = hotcodec.method_id(payload)
            if class_id != CLASS_BASIC:
                continue  # confirm.select-ok
            if method_id == METHOD_ACK:
                ack = hotcodec.decode_basic_ack(payload)
                self._settle(channel, ack.delivery_tag, ack.multiple, True)
            elif method_id == METHOD_NACK:
                nack = hotcodec.decode_basic_nack(payload)
                self._settle(channel, nack.delivery_tag, nack.multiple, False)
        if self._retired and not self._runs:
            self._close()

    def _settle(self, channel: LinkChannel, tag: int, multiple: bool, ok: bool) -> None:
        """The leader confirmed (or nacked) link seqs up to ``tag``: settle the oldest runs."""
        first = self._first
        if tag < first or tag >= self._next:
            return  # answered already, or never sent on this channel
        if not multiple and tag != first:  # out of order: never from a SieveMQ leader
            log.error("node '%s' confirmed publish %d before %d", self.leader, tag, first)
            channel.close()
            self.link_closed(channel, 0, "confirms out of order")
            return
        left = tag - first + 1
        self._first = tag + 1
        runs = self._runs
        while left:
            run = runs[0]
            sink, start, count = run
            if count <= left:
                runs.popleft()
                taken = count
            else:
                run[1] = start + left
                run[2] = count - left
                taken = left
            left -= taken
            if sink is not None:
                sink.settle_confirms(list(range(start, start + taken)), ok)

    def link_closed(self, channel: LinkChannel, code: int, text: str) -> None:
        """The link channel is gone: nack everything it did not confirm."""
        if channel is not self._channel:
            return
        self._channel = None
        if self._runs:
            why = f"{code} {text}" if code else text
            NACK_LOG.nacked(self.vhost, self.name, self.leader, self.unconfirmed, why)
        self._fail_all()

    def _fail_all(self) -> None:
        runs, self._runs = self._runs, deque()
        self._first = self._next
        for sink, start, count in runs:
            if sink is not None:
                sink.settle_confirms(list(range(start, start + count)), False)

    # ---------------------------------------------------------------- retiring

    def retire(self) -> None:
        """The queue is no longer led by ``leader`` (moved, deleted): close the link channel
        once what was forwarded is answered."""
        self._retired = True
        if not self._runs:
            self._close()

    def leader_moved(self, leader: str) -> None:
        """The queue's record names ``leader`` now, not ``self.leader`` (a failover): nack
        at once what was forwarded to the old leader and is not confirmed, here and on the
        raw forwards opened from this queue, and close their link channels (a late confirm
        from the old leader is dropped). Routing asks the records again for the next
        publishes (``Placement`` forgot this queue; a raw route ends on its next read)."""
        why = f"the queue's leader moved from node '{self.leader}' to node '{leader}'"
        for raw in list(self._raws):
            raw.abandon(why)
        self._raws.clear()
        self.abandon(why)

    def abandon(self, why: str) -> None:
        """Retired, the link channel closed and everything not confirmed nacked now."""
        self._retired = True
        if self._runs:
            NACK_LOG.nacked(self.vhost, self.name, self.leader, self.unconfirmed, why)
        self._close()
        self._fail_all()

    def _close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def close(self) -> None:
        """This node stops: nack what is outstanding and close the link channel."""
        self._close()
        self._fail_all()

    def describe(self) -> dict[str, Any]:
        return {"queue": self.name, "leader": self.leader, "unconfirmed": self.unconfirmed}


class RawForward(ForwardedQueue):
    """One client channel's publishes to queues another node leads, passed on as they came.

    A client channel whose publishes of one (exchange, routing key) route only to queues
    one other node leads (``gateway.session.raw_publish``) forwards them here without
    checking, routing or decoding them: each publish's content header and body frame go to
    a link channel of their own, pinned to the queue (one queue) or routed by the leader
    (several: ``ROUTED_TARGET`` with their number), with only the frame heads written
    anew (the channel number). The header's weight stays the client's 0 (``MARK_UNKNOWN``),
    so the leader checks the property list, as it does for its own clients, and answers
    what is wrong with it. The client channel frames each run of publishes of one read
    itself (``framing``) and hands it over in one call (``send_run``):

    - a message the leader refuses (a malformed property list, filter value or publisher
      id) closes this link channel with the leader's reply; ``sink.raw_refused`` closes the
      client's channel with that reply code and text, as a single node would, and nothing
      else (the link channel is this client channel's alone, and what the client sent after
      the refused message is dropped by the leader, as a closed channel drops it);
    - confirms come in runs from the leader (after its commit, for a replicated stream) and
      settle the client's sequence numbers through ``sink.settle_confirms``, as for
      ``ForwardedQueue``; a nack (the queue gone on the leader) or a lost link nacks.
    """

    __slots__ = ("_exchange", "_method", "_routing_key", "_sink")

    def __init__(
        self,
        links: Links,
        vhost: str,
        name: str,
        leader: str,
        sink: RawSink,
        exchange: str,
        routing_key: str,
    ) -> None:
        super().__init__(links, vhost, name, leader)
        self._sink = sink
        self._exchange = exchange
        self._routing_key = routing_key
        self._method = b""

    def framing(self) -> tuple[bytes, int, int]:
        """What the client channel frames a run with: the link channel's basic.publish frame,
        its number and the largest body one of its body frames takes (the link channel
        opens on first use, and again after the link dropped)."""
        channel = self._channel
        if channel is None:
            channel = self._open()
            self._method = self._publish_frame(channel.number, self._exchange, self._routing_key)
        return self._method, channel.number, self._body_max

    def send_run(self, frames_out: list[bytes], count: int, confirmed: bool, first: int) -> None:
        """HOT PATH (once per run): ``count`` publishes framed with ``framing()``, numbered
        ``first``... on the client's channel when ``confirmed``, out in the turn's write."""
        channel = self._channel
        assert channel is not None, "framing() opened it"
        sink = self._sink if confirmed else None
        self._next += count
        runs = self._runs
        last = runs[-1] if runs else None
        if last is not None and last[0] is sink and (sink is None or last[1] + last[2] == first):
            last[2] += count
        else:
            runs.append([sink, first, count])
        channel.writelines(frames_out)

    def link_closed(self, channel: LinkChannel, code: int, text: str) -> None:
        """The leader refused a message (``code``: its reply) or the link dropped (0)."""
        if channel is not self._channel:
            return
        if not code:
            super().link_closed(channel, code, text)
            return
        self._channel = None
        self._runs.clear()  # the client's channel closes: its confirms are void
        self._first = self._next
        self._sink.raw_refused(code, text)
