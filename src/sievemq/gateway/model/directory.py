"""Where a queue lives: the question the model asks of a cluster (Protocol only).

A single node has no directory (``Broker.directory`` is None) and every queue is its own. In
a cluster (``sievemq.cluster.placement``) a queue is led by the node that declared it; a node
that does not lead it knows it exists and says clearly where it is.
"""

from __future__ import annotations

from typing import Protocol


class QueueDirectory(Protocol):
    def leader_elsewhere(self, vhost: str, name: str) -> str | None:
        """The name of the node that leads the queue when it is another node, else None."""
        ...

    def not_here(self, vhost: str, name: str) -> str:
        """What a client is told when it uses the queue through a node that does not lead
        it (the leader and how to reach it; what is not built yet)."""
        ...
