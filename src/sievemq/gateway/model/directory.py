"""Where a queue lives: the questions the model and the sessions ask of a cluster (Protocol).

A single node has no directory (``Broker.directory`` is None) and every queue is its own. In
a cluster (``sievemq.cluster.placement``) each durable queue has a leader node recorded in
etcd; a node that does not lead a queue knows it exists, which node leads it and where that
node's stream listener is (Metadata names it), asks it through etcd to create (``balanced``
placement) or delete a queue, and forwards publishes to it: ``remote_queue`` gives the queue
as a publish sees it, a ``RemoteQueue`` that is its own writer (the channel submits to it as
it submits to a local queue's appender). It also opens link channels to a queue's leader
(``open_link``): consumers, gets, acks and purges through any node are served by the
leader's session code, relayed by ``gateway.session.remote``. Protocols only: the gateway
never imports ``sievemq.cluster``. ``QueueDirectory`` is the whole; each use names the part
it asks for (``Leaders``, ``Placement``, ``ExclusiveQueues``, ``Replies``, ``Links``,
``Forwarding``, ``StreamReplicas``, ``QuorumFeeds``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sievemq.gateway.model import locator
from sievemq.gateway.model.remote import RemoteQueue

if TYPE_CHECKING:
    from sievemq.gateway.model.stream.queue import StreamQueue
    from sievemq.gateway.model.vhost import VirtualHost


# an ``asyncio.Future[None]`` made by the cluster (the model itself never imports asyncio)
Pending = Any


class LeaderUnavailable(Exception):
    """The queue's leader node is not running now (the Stream protocol's code 6)."""


class LinkChannel(Protocol):
    """One open channel of the link to a queue's leader (``cluster.link.LinkChannel``)."""

    @property
    def number(self) -> int:
        """Its channel number on the link: the frames written to it carry it."""
        ...

    @property
    def frame_max(self) -> int:
        """The link's frame size: no frame the leader sends on it is larger."""
        ...

    @property
    def relay(self) -> bool:
        """The leader wraps its deliveries on this channel in relay frames, numbered as
        the client's channel (``open_link`` with ``relay``)."""
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


class Leaders(Protocol):
    """Which node leads a queue this node does not hold (placement, declares, Stream Metadata)."""

    def leader_elsewhere(self, vhost: str, name: str) -> str | None:
        """The name of the node that leads the queue when it is another node, else None."""
        ...

    def queue_type(self, vhost: str, name: str) -> str | None:
        """The recorded type (stream, classic, quorum) of a queue another node leads."""
        ...


class Placement(Leaders, Protocol):
    """Queues made and deleted on another node, through their etcd records (``balanced``
    placement, a Delete through a non-leader)."""

    def replica_holds(self, vhost: str, name: str, node: str, epoch: int, offset: int) -> None:
        """Replica ``node`` of a stream this node leads holds every offset below ``offset``
        (its acknowledgement, in ``epoch``): the committed offset may move (commit by
        majority, ``cluster/commit.py``)."""
        ...

    def choose_leader(self) -> str | None:
        """The node a ``balanced`` queue goes to: the live node leading the fewest queues
        (ties: the first name); None when that is this node."""
        ...

    def create_elsewhere(
        self, node: str, vhost: str, name: str, kind: str, arguments: dict[str, Any]
    ) -> Pending:
        """Record the new queue with ``node`` as its leader; done once that node made it
        (``ReplicationFailed`` naming the node when it did not in time)."""
        ...

    def delete_elsewhere(self, vhost: str, name: str) -> Pending:
        """Ask the queue's leader, through its record, to delete the queue; done once the
        record is gone (``LeaderUnavailable`` when the leader is not running)."""
        ...


class ExclusiveQueues(Protocol):
    """Exclusive queues cluster-wide: another node's is locked here (405)."""

    def exclusive_elsewhere(self, vhost: str, name: str) -> str | None:
        """The node whose client connection owns exclusive queue ``name`` when it is another
        node, else None (405 RESOURCE_LOCKED for any use of it through this node)."""
        ...

    def claim_exclusive(self, vhost: str, name: str) -> Pending | None:
        """Record a new exclusive queue of this node cluster-wide: the declare-ok waits for
        the future (``ReplicationFailed`` when etcd did not record it)."""
        ...

    def release_exclusive(self, vhost: str, name: str) -> None:
        """This node's exclusive queue is gone: the cluster forgets it."""
        ...


class Replies(Protocol):
    """Direct replies whose requester is on another node."""

    def forward_reply(self, vhost: str, name: str, props: bytes, body: bytes) -> bool:
        """Send a direct reply to the node whose requester made reply name ``name``; False
        when no other live node made it (``cluster/replies.py``)."""
        ...


class Links(Protocol):
    """Channels of the inter-node link to a queue's leader (``gateway.session.remote``)."""

    def open_link(
        self, vhost: str, name: str, receiver: LinkReceiver, number: int = 0, relay: bool = False
    ) -> LinkChannel:
        """A new channel on the link to the leader of the queue (frames may be written at
        once: they follow the channel.open); a leader that cannot be reached closes it
        (``link_closed`` with code 0, on a later loop turn). ``number``: the channel number
        wanted when it is free (a client's: what the leader sends needs no other);
        ``relay``: the leader sends its deliveries as relay frames (``amqp/spans.py``),
        framed for the client's channel ``number``, which pass to the client as they are."""
        ...


class Forwarding(Protocol):
    """Publishes routed through this node to a queue another node leads."""

    def remote_queue(self, vhost: str, name: str) -> RemoteQueue | None:
        """The queue as a publish routed to it through this node sees it, when another node
        leads it; None when no other node does (then this node holds it, or nobody)."""
        ...


class StreamReplicas(Protocol):
    """Where a stream's copies are: the nodes' stream listeners, its replicas, this node's
    copy (Stream Metadata and Subscribe)."""

    def stream_listener(self, node: str, tls: bool) -> tuple[str, int] | None:
        """A live node's Stream-protocol listener as it advertises it (host, port), or
        None when the node is not running (or has no such listener)."""
        ...

    def replicas(self, vhost: str, name: str) -> list[str]:
        """The nodes holding a replica of the stream (its record's, running or not)."""
        ...

    def replica_queue(self, vhost: str, name: str) -> StreamQueue | None:
        """This node's replica of the stream, for reading (None when it holds none)."""
        ...

    def replica_queues(self) -> list[StreamQueue]:
        """Every replica this node holds (the admin API lists their readers)."""
        ...


class FeedPeer(Protocol):
    """The leader's end of one replica's quorum-queue log feed (``amqp/queue_feed.py``)."""

    def frame(self, payload: bytes) -> None:
        """A feed method frame from the replica (HELLO, HOLDS)."""
        ...

    def close(self) -> None:
        """The feed's link channel is gone."""
        ...

    def writable(self) -> None:
        """The link's write buffer went under its low-water mark (after ``paused``)."""
        ...


@dataclass(frozen=True)
class FeedChannelEnd:
    """A feed's link channel as the leader writes to it: ``write`` sends whole frames
    (numbered ``channel``, at most ``frame_max``), ``close`` closes it (404 and the text),
    ``paused`` says whether the link's write buffer is over its high-water mark (the feed
    waits for ``FeedPeer.writable``)."""

    write: Callable[[list[bytes]], None]
    close: Callable[[str], None]
    channel: int
    frame_max: int
    paused: Callable[[], bool]


class QuorumFeeds(Protocol):
    """The log feeds of the quorum queues this node leads (``cluster/quorum_replication.py``)."""

    def quorum_feed(self, vhost: str, node: str, end: FeedChannelEnd) -> FeedPeer:
        """The leader's end of a feed channel that replica ``node`` opened in ``vhost``."""
        ...


class QueueDirectory(
    Placement, ExclusiveQueues, Replies, Links, Forwarding, StreamReplicas, QuorumFeeds, Protocol
):
    """All of it, as ``Broker.directory`` holds it (``cluster.placement.Placement``); each use
    takes the part it asks (``place_elsewhere`` a ``Placement``, ``session.remote`` the
    ``Links``, ...)."""


def place_elsewhere(
    directory: Placement | None,
    vhost: VirtualHost,
    name: str,
    durable: bool,
    exclusive: bool,
    arguments: dict[str, Any] | None,
) -> Pending | None:
    """A declare of a new queue whose leader locator (argument, else policy) is
    ``balanced`` and which the directory places on another node: the future of its
    creation there (the declare-ok waits for it). None: the queue is made here (a single
    node, a queue that exists, transient or exclusive, client-local, or chosen here).
    A locator that is not one is a 406; a new stream's arguments are checked here first."""
    args = dict(arguments or {})
    argument = locator.check_argument(args, name, vhost.name)
    if directory is None or not name or exclusive or not durable:
        return None
    if name in vhost.queues or name in vhost.classic.queues:
        return None
    if directory.leader_elsewhere(vhost.name, name) is not None:
        return None
    kind = vhost.classic.kind_of(args)
    definition = vhost.policy_definition(kind, name)
    if locator.effective(argument, definition) != locator.BALANCED:
        return None
    node = directory.choose_leader()
    if node is None:
        return None
    vhost.check_queue_limit(name)
    vhost.validate_new_queue(name, kind, durable, exclusive, args)
    return directory.create_elsewhere(node, vhost.name, name, kind, args)


@dataclass(eq=False)
class LeaderQueue:
    """A queue another node leads, as the consumers of one session hold it (their
    ``queue``): its name, its leader, and this session's consumers of it."""

    vhost: str
    name: str
    leader: str
    consumers: set[Any] = field(default_factory=set)
