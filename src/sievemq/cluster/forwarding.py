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
  new link channel (after the link's backoff, while the leader stays away).

Publisher dedup headers travel with the properties and the leader deduplicates as for its
own clients.
"""

from __future__ import annotations

import logging
import struct
from typing import Any, Final

import pamqp.commands as spec

from sievemq.amqp import frames, hotcodec
from sievemq.amqp.methods import BASIC_PUBLISH, CLASS_BASIC, METHOD_ACK, METHOD_NACK
from sievemq.cluster.link import LinkChannel, Links
from sievemq.gateway.model.directory import PublishSink
from sievemq.storage import Message

log = logging.getLogger("sievemq.cluster")

_METHOD_HEAD = struct.Struct(">BHIHH")
_NO_TICKET: Final = b"\x00\x00"
_NOT_MANDATORY: Final = b"\x00" + frames.FRAME_END_BYTE
_METHODS_MAX: Final = 1024
_encode_content = hotcodec.encode_content
_FRAME_METHOD: Final = frames.FRAME_METHOD


class ForwardedQueue:
    """A queue led by ``leader``, as this node's channels publish to it (a ``RemoteQueue``)."""

    __slots__ = (
        "_channel",
        "_first",
        "_links",
        "_methods",
        "_next",
        "_outstanding",
        "_retired",
        "leader",
        "name",
        "vhost",
    )

    def __init__(self, links: Links, vhost: str, name: str, leader: str) -> None:
        self._links = links
        self.vhost = vhost
        self.name = name
        self.leader = leader
        self._channel: LinkChannel | None = None
        # link seq -> (the client channel, its seq) until the leader confirms it
        self._outstanding: dict[int, tuple[PublishSink | None, int]] = {}
        self._first = 1  # the oldest link seq that may be outstanding
        self._next = 1  # the link seq of the next publish
        self._methods: dict[tuple[str, str], bytes] = {}  # basic.publish frames, this channel
        self._retired = False

    # ---------------------------------------------------------------- publishing (hot)

    def submit(self, message: Message, sink: PublishSink | None, seq: int) -> None:
        channel = self._channel
        if channel is None:
            channel = self._open()
        link_seq = self._next
        self._next = link_seq + 1
        self._outstanding[link_seq] = (sink, seq)
        key = (message.exchange, message.routing_key)
        method = self._methods.get(key)
        if method is None:
            method = self._publish_frame(channel.number, key)
        channel.writelines(
            _encode_content(
                [method], channel.number, message.properties, message.body, channel.frame_max
            )
        )

    def _publish_frame(self, number: int, key: tuple[str, str]) -> bytes:
        exchange = hotcodec.encode_shortstr(key[0])
        routing_key = hotcodec.encode_shortstr(key[1])
        size = 4 + 2 + len(exchange) + len(routing_key) + 1
        frame = b"".join(
            (
                _METHOD_HEAD.pack(_FRAME_METHOD, number, size, *BASIC_PUBLISH),
                _NO_TICKET,
                exchange,
                routing_key,
                _NOT_MANDATORY,
            )
        )
        if len(self._methods) >= _METHODS_MAX:
            self._methods.clear()
        self._methods[key] = frame
        return frame

    def _open(self) -> LinkChannel:
        channel = self._links.open_channel(self.leader, self.vhost, self, target=self.name)
        channel.send_method(spec.Confirm.Select())
        self._channel = channel
        self._methods.clear()  # framed for the old channel's number
        self._first = self._next = 1  # a new channel numbers its publishes from 1
        return channel

    # ---------------------------------------------------------------- the leader's answers

    def link_frames(self, channel: LinkChannel, got: list[tuple[int, bytes]]) -> None:
        if channel is not self._channel:
            return
        for ftype, payload in got:
            if ftype != _FRAME_METHOD:
                continue
            class_id, method_id = hotcodec.method_id(payload)
            if class_id != CLASS_BASIC:
                continue  # confirm.select-ok
            if method_id == METHOD_ACK:
                ack = hotcodec.decode_basic_ack(payload)
                self._settle(ack.delivery_tag, ack.multiple, True)
            elif method_id == METHOD_NACK:
                nack = hotcodec.decode_basic_nack(payload)
                self._settle(nack.delivery_tag, nack.multiple, False)
        if self._retired and not self._outstanding:
            self._close()

    def _settle(self, tag: int, multiple: bool, ok: bool) -> None:
        outstanding = self._outstanding
        if not multiple:
            one = outstanding.pop(tag, None)
            if one is not None and one[0] is not None:
                one[0].settle_confirms([one[1]], ok)
            if tag == self._first:
                self._first = tag + 1
            return
        first = self._first
        if tag < first:
            return
        pop = outstanding.pop
        sinks: dict[PublishSink, list[int]] = {}
        for link_seq in range(first, tag + 1):
            one = pop(link_seq, None)
            if one is None:
                continue
            sink = one[0]
            if sink is not None:
                seqs = sinks.get(sink)
                if seqs is None:
                    sinks[sink] = [one[1]]
                else:
                    seqs.append(one[1])
        self._first = tag + 1
        for sink, seqs in sinks.items():
            sink.settle_confirms(seqs, ok)

    def link_closed(self, channel: LinkChannel, code: int, text: str) -> None:
        """The link channel is gone: nack everything it did not confirm."""
        if channel is not self._channel:
            return
        self._channel = None
        if self._outstanding:
            log.warning(
                "publishes to queue '%s' in vhost '%s' forwarded to node '%s' are nacked: %s",
                self.name,
                self.vhost,
                self.leader,
                f"{code} {text}" if code else text,
            )
        self._fail_all()

    def _fail_all(self) -> None:
        outstanding, self._outstanding = self._outstanding, {}
        sinks: dict[PublishSink, list[int]] = {}
        for sink, seq in outstanding.values():
            if sink is not None:
                sinks.setdefault(sink, []).append(seq)
        for sink, seqs in sinks.items():
            sink.settle_confirms(seqs, False)

    # ---------------------------------------------------------------- retiring

    def retire(self) -> None:
        """The queue is no longer led by ``leader`` (moved, deleted): close the link channel
        once what was forwarded is answered."""
        self._retired = True
        if not self._outstanding:
            self._close()

    def _close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def close(self) -> None:
        """This node stops: nack what is outstanding and close the link channel."""
        self._close()
        self._fail_all()

    def describe(self) -> dict[str, Any]:
        return {"queue": self.name, "leader": self.leader, "unconfirmed": len(self._outstanding)}
