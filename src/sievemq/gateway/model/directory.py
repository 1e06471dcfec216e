"""Where a queue lives, and how a session reaches it: what the model asks of a cluster.

A single node has no directory (``Broker.directory`` is None) and every queue is its own. In
a cluster (``sievemq.cluster``) a queue is led by the node that declared it; a node that does
not lead it knows it exists and reaches it through the inter-node link: a session opens a
``LinkChannel`` to the leader (an AMQP channel on the link, served there by the leader's
ordinary session code), writes the client's methods there as frames and relays what comes
back, so a consumer, a get, an ack or a purge through any node works as on the leader.
Publishes routed to such a queue are forwarded: ``remote_queue`` gives the queue as a publish
sees it, a ``RemoteQueue`` that is its own writer (the channel submits to it as it submits to
a local queue's appender). Protocols only: the gateway never imports ``sievemq.cluster``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sievemq.storage import Message


class LinkChannel(Protocol):
    """One open channel of the link to a queue's leader (``cluster.link.LinkChannel``)."""

    @property
    def number(self) -> int:
        """Its channel number on the link: the frames written to it carry it."""
        ...

    def write(self, data: bytes) -> None:
        """Whole encoded frames for this channel, sent after what was written before."""
        ...

    def close(self) -> None:
        """channel.close on the link (the leader requeues what the channel had unacked);
        nothing more is handed to the receiver."""
        ...


class LinkReceiver(Protocol):
    """What a session gives the link for one link channel: the frames the leader sends on
    it, and its end."""

    def link_frames(self, channel: LinkChannel, got: list[tuple[int, bytes]]) -> None:
        """The frames (type, payload) the leader sent on the channel in one read, in order
        (channel.open-ok and channel.close are the link's own)."""
        ...

    def link_closed(self, channel: LinkChannel, code: int, text: str) -> None:
        """The channel is gone: the leader closed it (its reply code and text), or the link
        dropped (code 0 and why). What it had unacked is the leader's to requeue."""
        ...


class PublishSink(Protocol):
    """A publishing channel: told which of its messages were stored (or not)."""

    def settle_confirms(self, seqs: list[int], ok: bool) -> None: ...


class RemoteQueue(Protocol):
    """A queue another node leads, as this node's publishes see it (``cluster.forwarding``)."""

    @property
    def name(self) -> str: ...

    def submit(self, message: Message, sink: PublishSink | None, seq: int) -> None:
        """Forward one routed message; ``sink`` hears of ``seq`` once the leader stored it
        (or nacked it, or the link to the leader was lost before it answered)."""
        ...


class QueueDirectory(Protocol):
    def leader_elsewhere(self, vhost: str, name: str) -> str | None:
        """The name of the node that leads the queue when it is another node, else None."""
        ...

    def not_here(self, vhost: str, name: str) -> str:
        """What a client is told when it uses the queue through a node that cannot reach
        it (the leader, how to reach it, why)."""
        ...

    def open_link(self, vhost: str, name: str, receiver: LinkReceiver) -> LinkChannel:
        """A new channel on the link to the leader of the queue (frames may be written at
        once: they follow the channel.open); a leader that cannot be reached closes it
        (``link_closed`` with code 0, on a later loop turn)."""
        ...

    def remote_queue(self, vhost: str, name: str) -> RemoteQueue | None:
        """The queue as a publish routed to it through this node sees it, when another node
        leads it; None when no other node does (then this node holds it, or nobody)."""
        ...


@dataclass(eq=False)
class LeaderQueue:
    """A queue another node leads, as the consumers of one session hold it (their
    ``queue``): its name, its leader, and this session's consumers of it."""

    vhost: str
    name: str
    leader: str
    consumers: set[Any] = field(default_factory=set)
