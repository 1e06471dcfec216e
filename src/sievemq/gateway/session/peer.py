"""A connection from another cluster node: the server side of the inter-node link.

The link (``cluster/link.py``) speaks AMQP 0-9-1 to a node's cluster port, and this node serves
it with its ordinary session code: a forwarded publish goes through ``Channel.publish_fast``
and the stream's group-commit appender exactly as a client's does. What differs:

- **Login.** PLAIN with the connecting node's name as user and the cluster secret as password;
  anything else is 403 ACCESS_REFUSED (the node's users cannot log in here, and the secret is
  never logged). A node that has no secret yet (still joining) refuses every link.
- **Counted once.** Its publishes and confirms are not the node's (``self.counters``): the
  node the client published to counted them.
- **Trust.** The link acts for clients whose permissions the other node already checked: it
  may open any vhost, with every permission in it, and no vhost or user connection limit
  counts it. It is not listed among the node's client connections (``internal``).
- **Pinned channels.** A channel opened with a queue name in channel.open's reserved field (a
  client's is always empty or ``0``) stores every message published on it into that queue,
  with the exchange and routing key as published (the other node routed it); when this node
  holds no such queue, the publish is nacked. Publisher dedup headers work as on any channel.
  The other node checked each property list: the content header's weight says where its
  filter values are, and this node takes them without checking the list again.
- **Routed channels.** A channel opened with ``ROUTED_TARGET`` and a count carries one
  client channel's raw publishes that the other node found to route to that many queues,
  every one led here: this node checks and routes each (``RoutedChannel``).
- **Feed channels.** A channel opened with ``queue_feed.FEED_TARGET`` carries the log of a
  quorum queue this node leads to the other node's replica of it (``FeedChannel``).
- **Relay channels.** A channel opened with ``RELAY_TARGET`` and a client's channel number
  (``amqp/spans.py``) carries that client's consumer on the other node: its deliveries are
  framed with the client's channel number (``delivery_id``) and each turn of them goes out
  wrapped in relay frames, so the other node passes them to its client as they are (its
  delivery tags are the client's too, on a channel that has no other deliveries).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

import pamqp.commands as spec

from sievemq.amqp import errors, frames, negotiation, queue_feed, states
from sievemq.amqp.methods import BASIC_PUBLISH
from sievemq.amqp.spans import RELAY_TARGET, relay_frames
from sievemq.gateway.model.broker import MessageCounters
from sievemq.gateway.model.directory import FeedChannelEnd, FeedPeer
from sievemq.gateway.model.remote import ROUTED_TARGET
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.model.users import Permission, User
from sievemq.gateway.runtime.direct_replies import PSEUDO_BYTES as _REPLY_TO_PSEUDO
from sievemq.gateway.runtime.node import Node
from sievemq.gateway.session import publish_cache
from sievemq.gateway.session.channel import Channel, headers_of
from sievemq.gateway.session.connection import Connection

LINK_USER_PREFIX = "cluster-link:"

_filter_values_at = publish_cache.filter_values_at
_MARK_NONE = publish_cache.MARK_NONE
_MARK_UNKNOWN = publish_cache.MARK_UNKNOWN


def channel_target(payload: bytes) -> str:
    """The queue named in a channel.open's reserved shortstr ('' for none, or ``0``)."""
    size = payload[4] if len(payload) > 4 else 0
    raw = payload[5 : 5 + size]
    if raw in (b"", b"0"):
        return ""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.FrameError("channel.open: the target queue is not UTF-8", 20, 10) from None


def relay_number(target: str) -> int:
    """The client channel number a relay channel's target names (0: none)."""
    digits = target[len(RELAY_TARGET) :]
    if not digits.isdigit() or not 0 < int(digits) < 65536:
        raise errors.FrameError("channel.open: a bad relay channel number", 20, 10)
    return int(digits)


class PeerConnection(Connection):
    """A link connection from another node (see the module docstring)."""

    internal = True

    def __init__(self, node: Node, secret: Callable[[], str | None]) -> None:
        super().__init__(node)
        self._secret = secret
        # what the link carries was counted on the node its client published to (received,
        # confirmed, unroutable there), as RabbitMQ counts a publish at its channel's node:
        # counted here too, the cluster's totals would count each forwarded message twice.
        # The queue's own figures (its ``published``) still count it, on this node.
        self.counters = MessageCounters()

    def _start_ok(self, method: Any) -> None:
        self.client_properties = dict(method.client_properties or {})
        self.cancel_notify = True
        creds = negotiation.credentials(method)
        secret = self._secret()
        if secret is None or not hmac.compare_digest(
            creds.password.encode("utf-8"), secret.encode("utf-8")
        ):
            raise errors.ConnectionAccessRefused(
                "cluster link refused: the cluster secret does not match", 10, 11
            )
        self.user = User(LINK_USER_PREFIX + creds.username, "", ("administrator",))
        self.username = self.user.name
        self._offer = negotiation.tune(self.channel_max, self.frame_max, self.heartbeat)
        self.send_method(0, self._offer)

    def _open(self, method: Any) -> None:
        name = method.virtual_host or "/"
        vhost = self.node.broker.vhosts.get(name)
        if vhost is None or self.user is None:
            raise errors.NotAllowed(f"vhost {name} not found")
        self.user.permissions[name] = Permission()  # trusted: the other node checked
        self.vhost = vhost
        self.vhost_name = name
        self.opened = True
        self.send_method(0, spec.Connection.OpenOk())

    def _fail(self, error: errors.AMQPError, chid: int) -> None:
        """A link carries the channels of many clients: a connection-level error that one
        forwarded method caused (540 for basic.get on a stream...) closes only its channel,
        with that reply; the other node passes it on to its client as that client's own."""
        channel = self.channels.get(chid) if chid else None
        if channel is not None and error.closes_connection:
            channel.close_by_server(error)
            return
        super()._fail(error, chid)

    def new_channel(self, state: states.ChannelState, payload: bytes) -> Channel:
        target = channel_target(payload)
        channel: Channel
        if target == queue_feed.FEED_TARGET:
            channel = FeedChannel(self, state)
        elif target.startswith(RELAY_TARGET):
            channel = RelayChannel(self, state, relay_number(target))
        elif target.startswith(ROUTED_TARGET):
            channel = RoutedChannel(self, state, routed_count(target))
        elif target:
            channel = PinnedChannel(self, state, target)
        else:
            channel = Channel(self, state)
        channel.forwards = False  # the other node routed: nothing goes on to a third
        return channel


class FeedChannel(Channel):
    """A link channel on which another node's replica of a quorum queue this node leads
    takes the queue's log (``amqp/queue_feed.py``): its feed frames go to the cluster's
    shipper (``QuorumFeeds``), every other frame (channel.close) is a channel's."""

    def __init__(self, connection: PeerConnection, state: states.ChannelState) -> None:
        super().__init__(connection, state)
        directory = connection.node.broker.directory
        node = connection.username[len(LINK_USER_PREFIX) :]
        self.feed: FeedPeer | None = None
        if directory is not None:
            end = FeedChannelEnd(
                self._write, self._close_feed, self.id, connection.frame_max, self._paused
            )
            self.feed = directory.quorum_feed(connection.vhost_name, node, end)

    def _paused(self) -> bool:
        return self.connection.writing_paused

    def wake_consumers(self) -> None:
        """The connection's write buffer drained: the feed sends again."""
        super().wake_consumers()
        if self.feed is not None:
            self.feed.writable()

    def _write(self, parts: list[bytes]) -> None:
        if not self.closing:
            self.connection.write_frames(parts)

    def _close_feed(self, text: str) -> None:
        if not self.closing:
            self.close_by_server(errors.NotFound(text))

    def on_frame(self, ftype: int, payload: bytes) -> None:
        if ftype == frames.FRAME_METHOD and queue_feed.is_feed(payload):
            if self.feed is None:
                raise errors.NotFound("this node is not in a cluster: no quorum feed")
            self.feed.frame(payload)
            return
        super().on_frame(ftype, payload)

    def teardown(self) -> None:
        if self.feed is not None:
            self.feed.close()
            self.feed = None
        super().teardown()


class RelayChannel(Channel):
    """A link channel whose deliveries the other node passes to its client as they are: each
    turn's frames go in relay frames that also carry the last delivery tag given so far
    (the other node's own count of what its client holds)."""

    def __init__(self, connection: PeerConnection, state: states.ChannelState, number: int):
        super().__init__(connection, state)
        self.delivery_id = number or self.id

    def write_deliveries(self, data: bytes) -> None:
        connection = self.connection
        connection.write_frames(
            relay_frames(self.id, data, self.next_delivery_tag - 1, connection.frame_max)
        )


class LinkPublishChannel(Channel):
    """A link channel whose publishes the other node routed here (pinned or routed)."""

    def _store(self, queues: list[Any], body: bytes, values: tuple[str, ...]) -> None:
        """A link channel's publish into ``queues`` (this node's, found by the channel): the
        ordinary path's tail (``Channel.store``: dedup, confirms, the queues' writers); none:
        nacked, since the other node found it routed (not stored, so not confirmed)."""
        if not queues:  # deleted meanwhile, or never here: not stored, so nack
            confirm = self.confirm
            if confirm is not None:
                confirm.settle(confirm.take(1), False)
                self._schedule_confirms()
            return
        self.store(queues, body, values)


class PinnedChannel(LinkPublishChannel):
    """A link channel whose publishes all go to one queue (``target``), routed elsewhere.

    The other node checked each property list and found its filter values: the content
    header's weight says where they are (``publish_cache.filter_mark``), and the fast path
    takes them from there instead of checking the list again. A weight of 0 (a multi-frame
    body, a node that does not mark) is checked here as a client's."""

    def __init__(self, connection: PeerConnection, state: states.ChannelState, target: str):
        super().__init__(connection, state)
        self.target = target
        self._header = b""
        self._checked_properties = self._known_properties
        self._known_properties = self._marked_properties

    def publish_fast(self, method: bytes, header: frames.Frame, body: frames.Frame) -> bool:
        self._header = header[2]  # read by ``_marked_properties`` once the sizes are checked
        return super().publish_fast(method, header, body)

    def _marked_properties(self, props: bytes) -> tuple[str, ...] | None:
        """The filter values the other node found (None: check the list here)."""
        header = self._header
        mark = header[2] << 8 | header[3]
        if mark == _MARK_NONE:
            return ()
        if mark == _MARK_UNKNOWN or _REPLY_TO_PSEUDO in props:
            return self._checked_properties(props)
        return _filter_values_at(props, mark - 2)

    def _complete(self, body: bytes, values: tuple[str, ...] | None = None) -> None:
        """Store into the target queue (the ordinary path's tail: dedup, confirms, the
        queue's writer), or nack when this node holds no such queue."""
        values = _checked(self._props, values)
        vhost = self.connection.vhost
        assert vhost is not None
        target = self.target
        queue = vhost.queues.get(target) or vhost.classic.queues.get(target)
        self._store([queue] if queue is not None else [], body, values)


class RoutedChannel(LinkPublishChannel):
    """A link channel whose publishes the other node found to route to ``count`` queues,
    every one led here (``session.raw_publish``): passed on raw, so this node checks each
    property list, as a client's, and routes it by its own bindings. A publish that does not
    route here to exactly ``count`` queues (a queue moved to another leader, or deleted, a
    binding changed, before the other node heard of it) is nacked, never stored in part:
    the other node routes its next publishes anew. ``count`` 0: a headers exchange's, every
    queue of which the other node found led here: routed by its headers, nacked when one of
    those queues is led elsewhere, dropped (and confirmed) when it routes nowhere, as a
    single node drops a publish that is not mandatory."""

    def __init__(self, connection: PeerConnection, state: states.ChannelState, count: int):
        super().__init__(connection, state)
        self.count = count

    def _complete(self, body: bytes, values: tuple[str, ...] | None = None) -> None:
        exchange, routing_key, _ = self._pub
        props = self._props
        values = _checked(props, values)
        vhost = self.connection.vhost
        assert vhost is not None
        try:
            queues = _shared(vhost.route(exchange, routing_key, lambda: headers_of(props)))
        except errors.AMQPError:  # the exchange is gone here, or internal: not stored
            queues = []
        if self.count:
            self._store(queues if len(queues) == self.count else [], body, values)
        elif not self._leads_all(vhost, exchange):
            self._store([], body, values)  # nacked: a queue it may reach is led elsewhere
        elif queues:
            self._store(queues, body, values)
        elif self.confirm is not None:  # routed nowhere by its headers: dropped, confirmed
            self.confirm.take(0)
            self._schedule_confirms()

    def _leads_all(self, vhost: Any, exchange: str) -> bool:
        """Every queue a publish to ``exchange`` may reach is this node's (or nowhere): a
        headers exchange's publishes are routed here only then (as the other node found)."""
        directory = self.connection.node.broker.directory
        for name in vhost.reachable_queues(exchange):
            if name in vhost.queues or name in vhost.classic.queues:
                continue
            if directory is not None and directory.remote_queue(vhost.name, name) is not None:
                return False
        return True


def _shared(queues: list[Any]) -> list[Any]:
    """The queues the other node routes to as well: those recorded in etcd (streams, and
    durable classic and quorum queues that are not exclusive). A transient or exclusive
    queue is this node's alone: a publish through another node does not reach it, raw or
    not (the ordinary path forwards to recorded queues only)."""
    return [q for q in queues if isinstance(q, StreamQueue) or (q.durable and not q.exclusive)]


def routed_count(target: str) -> int:
    """How many queues a routed channel's publishes go to (its target's number; 0: by
    their headers)."""
    digits = target[len(ROUTED_TARGET) :]
    if not digits.isdigit() or int(digits) == 1 or int(digits) >= 65536:
        raise errors.FrameError("channel.open: a bad routed queue count", 20, 10)
    return int(digits)


def _checked(props: bytes, values: tuple[str, ...] | None) -> tuple[str, ...]:
    """The filter values of a publish's property list (checked now unless found already)."""
    if values is not None:
        return values
    try:
        return publish_cache.filter_values(props)
    except errors.PreconditionFailed as error:
        error.class_id, error.method_id = BASIC_PUBLISH
        raise
