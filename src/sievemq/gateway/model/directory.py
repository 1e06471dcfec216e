"""Where a queue lives: the questions the model and the sessions ask of a cluster (Protocol).

A single node has no directory (``Broker.directory`` is None) and every queue is its own. In
a cluster (``sievemq.cluster.placement``) each durable queue has a leader node recorded in
etcd; a node that does not lead a queue knows it exists, which node leads it and where that
node's stream listener is (Metadata names it), asks it through etcd to create (``balanced``
placement) or delete a queue, and forwards publishes to it: ``remote_queue`` gives the queue
as a publish sees it, a ``RemoteQueue`` that is its own writer (the channel submits to it as
it submits to a local queue's appender).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sievemq.gateway.model import locator, policies
from sievemq.gateway.model.remote import RemoteQueue

if TYPE_CHECKING:
    from sievemq.gateway.model.stream.queue import StreamQueue
    from sievemq.gateway.model.vhost import VirtualHost


# an ``asyncio.Future[None]`` made by the cluster (the model itself never imports asyncio)
Pending = Any


class LeaderUnavailable(Exception):
    """The queue's leader node is not running now (the Stream protocol's code 6)."""


class QueueDirectory(Protocol):
    def leader_elsewhere(self, vhost: str, name: str) -> str | None:
        """The name of the node that leads the queue when it is another node, else None."""
        ...

    def not_here(self, vhost: str, name: str) -> str:
        """What a client is told when it uses the queue through a node that does not lead
        it (the leader and how to reach it; what is not built yet)."""
        ...

    def remote_queue(self, vhost: str, name: str) -> RemoteQueue | None:
        """The queue as a publish routed to it through this node sees it, when another node
        leads it; None when no other node does (then this node holds it, or nobody)."""
        ...

    def queue_type(self, vhost: str, name: str) -> str | None:
        """The recorded type (stream, classic, quorum) of a queue another node leads."""
        ...

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


def place_elsewhere(
    directory: QueueDirectory | None,
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
    mine = policies.ranked(vhost.policies.values())
    operators = policies.ranked(vhost.operator_policies.values())
    definition = policies.effective_definition(
        policies.match(mine, kind, name), policies.match(operators, kind, name)
    )
    if locator.effective(argument, definition) != locator.BALANCED:
        return None
    node = directory.choose_leader()
    if node is None:
        return None
    vhost.check_queue_limit(name)
    vhost.validate_new_queue(name, kind, durable, exclusive, args)
    return directory.create_elsewhere(node, vhost.name, name, kind, args)
