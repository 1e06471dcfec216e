"""A declared stream-protocol publisher: dedup by reference, append, confirm.

HOT PATH: ``publish_frame`` runs per Publish frame and goes from the frame's bytes to stored
messages in one pass (``publish`` is the general path, for frames with sub-entry batches,
from ``wire.parse_publish``'s entries). Messages go to the stream's shared appender
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

import struct
from typing import TYPE_CHECKING

from sievemq.storage import Message
from sievemq.storage.publishers import PublisherSequences, publisher_tag
from sievemq.storage.types import KIND_STREAM
from sievemq.streamproto import wire

_new_message = tuple.__new__  # Message(...) without the NamedTuple constructor's call
_unpack_id_len = struct.Struct(">Qi").unpack_from  # Publish v1: publishing id, length
_unpack_id_flen = struct.Struct(">Qh").unpack_from  # v2: publishing id, filter value length
_unpack_len = struct.Struct(">i").unpack_from
_unpack_count = struct.Struct(">i").unpack_from
_pack_id = struct.Struct(">Q").pack

if TYPE_CHECKING:
    from sievemq.gateway.model.broker import MessageCounters
    from sievemq.gateway.model.stream.queue import StreamQueue
    from sievemq.gateway.runtime.stream.appender import StreamAppender
    from sievemq.gateway.streamproto_session.ports import ConnectionPort


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

    def publish_frame(self, body: bytes, version: int) -> None:
        """A Publish frame's body (v1 or v2) for this publisher, in ONE pass: each message
        goes from its bytes in the frame to a stored ``Message`` (no intermediate entry).
        A frame with a sub-entry batch takes the general path (``wire.parse_publish``);
        a torn frame raises ``FrameError``."""
        data = body
        size = len(data)
        sequences = self.sequences
        last = -1
        ref = b""
        if sequences is not None:
            stored = sequences.get(self.reference)
            last = -1 if stored is None else stored
            ref = self.reference.encode()
        messages: list[Message] = []
        pids: list[int] = []
        duplicates: list[int] = []
        add = messages.append
        add_pid = pids.append
        new = _new_message
        pack_id = _pack_id
        tag = b""
        no_filter: tuple[str, ...] = ()
        filters: dict[bytes, tuple[str, ...]] = {}
        try:
            if size < 5:
                raise wire.FrameError("Publish frame shorter than its header")
            (n,) = _unpack_count(data, 1)
            if n < 0 or n > size:
                raise wire.FrameError(f"Publish frame of {n} messages")
            pos = 5
            for _ in range(n):
                fv = no_filter
                if version >= 2:
                    pid, fl = _unpack_id_flen(data, pos)
                    pos += 10
                    if fl >= 0:
                        raw = data[pos : pos + fl]
                        got = filters.get(raw)
                        if got is None:
                            got = filters[raw] = (raw.decode(),) if raw else no_filter
                        fv = got
                        pos += fl
                    (length,) = _unpack_len(data, pos)
                    pos += 4
                else:
                    pid, length = _unpack_id_len(data, pos)
                    pos += 12
                if length < 0:  # a sub-entry batch: the general path
                    self.publish(wire.parse_publish(body, version)[1])
                    return
                end = pos + length
                if end > size:
                    raise wire.FrameError("message runs past the frame end")
                if sequences is not None:
                    if pid <= last:
                        duplicates.append(pid)
                        pos = end
                        continue
                    last = pid
                    tag = pack_id(pid) + ref
                add_pid(pid)
                add(new(Message, (fv, "", "", tag, data[pos:end], KIND_STREAM)))
                pos = end
        except (struct.error, UnicodeDecodeError) as error:
            raise wire.FrameError(f"malformed Publish frame: {error}") from error
        if sequences is not None and last >= 0:
            sequences.update(self.reference, last)
        sinks: list[StreamPublisher | None] = [self] * len(messages)
        self._hand_over(n, messages, sinks, pids, duplicates, [])

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
        self._hand_over(len(entries), messages, sinks, pids, duplicates, errors)

    def _hand_over(
        self,
        received: int,
        messages: list[Message],
        sinks: list[StreamPublisher | None],
        pids: list[int],
        duplicates: list[int],
        errors: list[tuple[int, int]],
    ) -> None:
        """Messages to the appender (one call), duplicates confirmed, errors answered."""
        self.published += received
        counters = self.counters
        counters.stream_received += received
        counters.stream_routed += len(pids)
        if pids:
            self.conn.take_publish_credits(len(pids))
            self.appender.submit_many(messages, sinks, self, pids)
        if duplicates:
            if self.appender.stream.gated:  # confirmed once their first copy is committed
                self.conn.take_publish_credits(len(duplicates))
                self.appender.confirm_duplicates(self, duplicates)
            else:
                self.confirmed += len(duplicates)
                counters.stream_confirmed += len(duplicates)
                self.conn.write(wire.publish_confirm(self.publisher_id, duplicates))
        if errors:
            self.errored += len(errors)
            self.conn.write(wire.publish_error(self.publisher_id, errors))

    # gateway.runtime.ports.ConfirmSink
    def settle_confirms(self, seqs: list[int], ok: bool) -> None:
        if not ok and self.sequences is not None and seqs:
            # not stored: a resend is no duplicate (also when the connection is gone: the
            # publisher resends on its next one)
            self.sequences.rewind(self.reference, min(seqs))
        if not self.conn.alive:
            return
        if ok:
            self.confirmed += len(seqs)
            self.counters.stream_confirmed += len(seqs)
            self.conn.write(wire.publish_confirm(self.publisher_id, seqs))
        else:
            self._error(seqs)
        self.conn.return_publish_credits(len(seqs))

    def nack_written(self, seqs: list[int]) -> None:
        """Written to the log but never to be confirmed here (fenced, the stream gone): a
        PublishError, and the sequence stays, so a resend with the same id is a duplicate
        (it is in the log; rewinding would store it twice)."""
        if not self.conn.alive:
            return
        self._error(seqs)
        self.conn.return_publish_credits(len(seqs))

    def _error(self, seqs: list[int]) -> None:
        self.errored += len(seqs)
        gone = self.queue.deleted or self.queue.fenced  # (fenced: cluster.failover)
        code = wire.STREAM_NOT_AVAILABLE if gone else wire.INTERNAL_ERROR
        self.conn.write(wire.publish_error(self.publisher_id, [(s, code) for s in seqs]))
