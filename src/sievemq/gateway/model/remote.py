"""A queue another cluster node leads, as this node's publishes see it (Protocols only).

``VirtualHost.route`` returns a ``RemoteQueue`` (from ``QueueDirectory.remote_queue``) for a
queue name this node does not hold; the channel submits a routed message to it exactly as to
a local queue's appender, and hears of it through ``PublishSink.settle_confirms``.
"""

from __future__ import annotations

from typing import Final, Protocol

from sievemq.storage import Message

# channel.open's target for a link channel whose raw publishes the leader routes itself
# (``session.peer.RoutedChannel``), followed by how many of its queues they route to (0: as
# many as each message's headers pick, of a headers exchange whose queues it all leads)
ROUTED_TARGET: Final = "\x00routed:"


class PublishSink(Protocol):
    """A publishing channel: told which of its messages were stored (or not)."""

    def settle_confirms(self, seqs: list[int], ok: bool) -> None: ...


class RawSink(PublishSink, Protocol):
    """A client channel whose publishes go to one remote queue as they came (``RawPublisher``)."""

    def raw_refused(self, code: int, text: str) -> None:
        """The leader refused one of them with this reply (a malformed property list...):
        the client's channel closes with it, as on a single node."""
        ...


class RawPublisher(Protocol):
    """One client channel's publishes to a remote queue, passed on without being checked,
    routed or decoded here (the leader checks them: ``cluster.forwarding.RawForward``)."""

    def framing(self) -> tuple[bytes, int, int]:
        """The link's basic.publish frame, channel number and largest one-frame body: the
        client channel frames a run of publishes with them (``send_run``)."""
        ...

    def send_run(self, frames_out: list[bytes], count: int, confirmed: bool, first: int) -> None:
        """``count`` publishes framed with ``framing()`` (their sequence numbers from
        ``first`` when ``confirmed``): out to the leader in this turn's write."""
        ...

    def retire(self) -> None:
        """No more publishes: close the link channel once what went is answered."""
        ...


class RemoteQueue(Protocol):
    """A queue another node leads, as this node's publishes see it (``cluster.forwarding``)."""

    @property
    def name(self) -> str: ...

    @property
    def leader(self) -> str:
        """The node that leads it."""
        ...

    def submit(self, message: Message, sink: PublishSink | None, seq: int) -> None:
        """Forward one routed message; ``sink`` hears of ``seq`` once the leader stored it
        (or nacked it, or the link to the leader was lost before it answered)."""
        ...

    def open_raw(
        self, sink: RawSink, exchange: str, routing_key: str, queues: int = 1
    ) -> RawPublisher | None:
        """A ``RawPublisher`` for one channel's publishes of (``exchange``, ``routing_key``),
        which route to this queue alone (``queues`` 1), or to ``queues`` queues its leader
        leads, this one among them, or by each message's headers to queues its leader leads
        (``queues`` 0; the leader routes them); None when this queue is no longer the
        leader's."""
        ...
