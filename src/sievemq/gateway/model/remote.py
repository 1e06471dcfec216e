"""A queue another cluster node leads, as this node's publishes see it (Protocols only).

``VirtualHost.route`` returns a ``RemoteQueue`` (from ``QueueDirectory.remote_queue``) for a
queue name this node does not hold; the channel submits a routed message to it exactly as to
a local queue's appender, and hears of it through ``PublishSink.settle_confirms``.
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
