"""A declared stream-protocol publisher: dedup by reference, append, confirm.

HOT PATH: ``publish`` runs per Publish frame. Messages go to the stream's shared appender
(group commit with AMQP publishers); the appender calls ``settle_confirms`` once per written
batch with the publishing ids this publisher owns in it, and that becomes ONE PublishConfirm
(or PublishError) frame.

Deduplication (named publishers only): an id at or below the last id stored for the
reference on this stream is not written but confirmed (RabbitMQ's rule).

Flow control: every publishing id handed to the appender takes one of the connection's
publish credits, and its confirm (or error) gives it back (``take_publish_credits``). The last id is
recorded in each written record (``storage.publishers``), so it is durable with the data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sievemq.storage import Message
from sievemq.storage.publishers import PublisherSequences, publisher_tag
from sievemq.storage.types import KIND_STREAM
from sievemq.streamproto import wire

_new_message = tuple.__new__  # Message(...) without the NamedTuple constructor's call

if TYPE_CHECKING:
    from sievemq.gateway.model.broker import MessageCounters
    from sievemq.gateway.model.queue import StreamQueue
    from sievemq.gateway.runtime.appender import StreamAppender
    from sievemq.gateway.stream_session.ports import ConnectionPort


class StreamPublisher:
    """One DeclarePublisher on one connection."""

    __slots__ = (
        "appender",
        "confirmed",
        "conn",
        "counters",
        "errored",
        "published",
        "publisher_id",
        "queue",
        "reference",
        "sequences",
    )

    def __init__(
        self,
        conn: ConnectionPort,
        publisher_id: int,
        reference: str,
        queue: StreamQueue,
        appender: StreamAppender,
        sequences: PublisherSequences | None,
        counters: MessageCounters,
    ) -> None:
        self.conn = conn
        self.counters = counters  # the node's: received and routed, per Publish frame
        self.publisher_id = publisher_id
        self.reference = reference
        self.queue = queue
        self.appender = appender
        self.sequences = sequences
        # RabbitMQ's publisher metrics: publishing ids received, confirmed, errored
        self.published = 0
        self.confirmed = 0
        self.errored = 0

    def publish(self, entries: list[wire.PublishedEntry]) -> None:
        errors: list[tuple[int, int]] = []
        duplicates: list[int] = []
        sequences = self.sequences
        ref = self.reference
        last = -1
        if sequences is not None:
            stored = sequences.get(ref)
            last = -1 if stored is None else stored
        # one list of messages, one of their confirm sinks and one of the publishing ids,
        # handed to the appender at once (no per-message submit)
        messages: list[Message] = []
        sinks: list[StreamPublisher | None] = []
        pids: list[int] = []
        add = messages.append
        new = _new_message
        tag = b""
        for pid, fv, payloads, error in entries:
            if error:
                errors.append((pid, error))
                continue
            filters = (fv,) if fv else ()
            if sequences is not None:
                if pid <= last:
                    duplicates.append(pid)
                    continue
                last = pid
                tag = publisher_tag(ref, pid)
            pids.append(pid)
            if len(payloads) == 1:
                add(new(Message, (filters, "", "", tag, payloads[0], KIND_STREAM)))
                sinks.append(self)
                continue
            for payload in payloads:  # a sub-entry batch: its last message carries the id
                add(new(Message, (filters, "", "", tag, payload, KIND_STREAM)))
                sinks.append(None)
            sinks[-1] = self
        if sequences is not None and last >= 0:
            sequences.update(ref, last)
        self.published += len(entries)
        counters = self.counters
        counters.stream_received += len(entries)
        counters.stream_routed += len(pids)
        if pids:
            self.conn.take_publish_credits(len(pids))
            self.appender.submit_many(messages, sinks, self, pids)
        if duplicates:
            self.confirmed += len(duplicates)
            counters.stream_confirmed += len(duplicates)
            self.conn.write(wire.publish_confirm(self.publisher_id, duplicates))
        if errors:
            self.errored += len(errors)
            self.conn.write(wire.publish_error(self.publisher_id, errors))

    # gateway.runtime.appender.ConfirmSink
    def settle_confirms(self, seqs: list[int], ok: bool) -> None:
        if not self.conn.alive:
            return
        if ok:
            self.confirmed += len(seqs)
            self.counters.stream_confirmed += len(seqs)
            self.conn.write(wire.publish_confirm(self.publisher_id, seqs))
        else:
            self.errored += len(seqs)
            code = wire.STREAM_NOT_AVAILABLE if self.queue.deleted else wire.INTERNAL_ERROR
            self.conn.write(wire.publish_error(self.publisher_id, [(s, code) for s in seqs]))
        self.conn.return_publish_credits(len(seqs))
