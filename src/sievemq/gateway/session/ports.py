"""The Protocols the session talks through, so that none of its modules imports another back.

The session's modules import in one direction only (``tests/test_architecture.py`` checks that
no import circle is left anywhere in ``src/``)::

    connection ─> channel ─> consumer ─> ports ─> model.stream.queue, runtime.node
         │           │                    ^
         └───────────┴────────────────────┘

Each arrow that used to point back is one of these Protocols instead:

- ``DeliveryTarget``: what a ``StreamConsumer`` delivers through (its ``Channel``): it asks once
  per delivery turn whether it may write, takes the turn's delivery tags in one call and hands
  the whole encoded batch over as ONE buffer (nothing here runs per message).
- ``ChannelConsumer``: what a channel keeps of its consumers (settle, credit back, stop); it is
  a ``model.stream.queue.ConsumerInfo``, the view the queue, the node and the admin facade have.
- ``ChannelHost``: what a ``Channel`` needs of its ``Connection``.

The node holds its connections as ``runtime.node.ClientConnection`` (alarms and shutdown).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from sievemq.gateway.model.broker import MessageCounters
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.directory import LeaderQueue
from sievemq.gateway.model.stream.queue import ConsumerInfo, StreamQueue
from sievemq.gateway.model.vhost import VirtualHost
from sievemq.gateway.runtime.node import Node
from sievemq.gateway.session.stream.named_consumers import OffsetTracker


class ChannelConsumer(ConsumerInfo, Protocol):
    """A consumer as its channel holds it (``session.stream.consumer.StreamConsumer``, the
    classic and the remote ones)."""

    @property
    def queue(self) -> StreamQueue | ClassicQueue | LeaderQueue: ...
    @property
    def tracker(self) -> OffsetTracker | None: ...
    def give_credit(self, n: int) -> None: ...
    def count_acks(self, n: int) -> None:
        """``n`` of its deliveries were settled by basic.ack (a stream's ``ack`` count;
        a classic queue counts its own when it settles)."""
        ...

    def wake(self) -> None: ...
    def stop(self) -> None: ...


class DeliveryTarget(Protocol):
    """Where a consumer writes its deliveries: its channel (``session.channel.Channel``)."""

    @property
    def id(self) -> int:
        """The channel's number."""
        ...

    @property
    def delivery_id(self) -> int:
        """The channel number the deliveries are framed for: its own, but a link channel
        relaying to a client on another node frames them for the client's channel."""
        ...

    @property
    def connection_id(self) -> int: ...

    @property
    def frame_max(self) -> int:
        """The connection's negotiated frame size (body frames are split by it; fixed once
        a channel is open)."""
        ...

    def can_deliver(self) -> bool:
        """False while the client's socket is backed up, after channel.flow(false), or once
        the socket is closing; the connection wakes the consumers when that changes."""
        ...

    def take_delivery_tags(self, consumer: ChannelConsumer, n: int) -> int:
        """Reserve ``n`` consecutive delivery tags for ``consumer`` (each unacked until the
        client settles it) and return the first."""
        ...

    def write_deliveries(self, data: bytes) -> None:
        """Write one turn's encoded deliveries, after any replies queued before them."""
        ...

    def cancel_consumer_by_server(self, consumer: ChannelConsumer) -> None: ...


class ClosedChannel(Protocol):
    """A channel telling its connection it is gone."""

    @property
    def id(self) -> int: ...
    @property
    def has_published(self) -> bool: ...


class HeldChannel(Protocol):
    """A channel whose frames wait for a definitions sync (``Channel.backlog``)."""

    @property
    def id(self) -> int: ...


class ChannelHost(Protocol):
    """What a channel needs of its connection (``session.connection.Connection``)."""

    node: Node
    # where its publishes and confirms are counted (the node's, or a cluster link's own)
    counters: MessageCounters
    vhost: VirtualHost | None
    vhost_name: str
    user: Any  # the authenticated model.users.User (its permissions are checked per method)
    cancel_notify: bool
    writing_paused: bool
    # body bytes of unfinished messages over all channels (max_pending_content_bytes)
    pending_content: int
    # moved by every read and every cold channel method (``session.raw_publish``)
    route_stamp: int

    @property
    def id(self) -> int: ...
    @property
    def frame_max(self) -> int: ...
    @property
    def transport(self) -> asyncio.Transport | None: ...
    def can_write(self) -> bool:
        """The socket is open and not closing."""
        ...

    def send_method(self, channel: int, method: Any) -> None: ...
    def write_frames(self, data: list[bytes]) -> None: ...
    def write_joined(self, data: bytes) -> None: ...
    def channel_closed(self, channel: ClosedChannel) -> None: ...
    def flush(self) -> None: ...
    def close(self, error: Any) -> None:
        """Close the connection with the error's reply (an ``amqp.errors.AMQPError``)."""
        ...

    def begin_capture(self) -> int: ...
    def end_capture(self, mark: int, hold: bool) -> list[bytes]: ...
    def resume_channel(
        self, channel: HeldChannel, held: list[bytes], backlog: list[tuple[int, bytes]]
    ) -> None: ...
    def resume_held(
        self,
        channel: HeldChannel,
        work: Callable[[], None] | BaseException,
        backlog: list[tuple[int, bytes]],
    ) -> None: ...
