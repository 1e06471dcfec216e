"""Where a queue lives: the question the model asks of a cluster (Protocols only).

A single node has no directory (``Broker.directory`` is None) and every queue is its own. In
a cluster (``sievemq.cluster.placement``) a queue is led by the node that declared it; a node
that does not lead it knows it exists, says clearly where it is, and forwards publishes to it:
``remote_queue`` gives the queue as a publish sees it, a ``RemoteQueue`` that is its own
writer (the channel submits to it as it submits to a local queue's appender).
"""

from __future__ import annotations

from typing import Protocol

from sievemq.storage import Message


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
        """What a client is told when it uses the queue through a node that does not lead
        it (the leader and how to reach it; what is not built yet)."""
        ...

    def remote_queue(self, vhost: str, name: str) -> RemoteQueue | None:
        """The queue as a publish routed to it through this node sees it, when another node
        leads it; None when no other node does (then this node holds it, or nobody)."""
        ...
