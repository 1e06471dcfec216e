"""A stream consumer: reads its own StreamReader and writes deliveries while it has credit.

HOT PATH. Credit starts at the prefetch count; every delivery costs one and every ack, nack,
reject or recover gives it back (nothing is redelivered). The consumer is woken by the
stream's commit listener (no polling) and by returned credit, reads up to ``credit`` records
per turn (bounded by the reader's ``max_chunks`` budget so a long filtered scan never holds the
loop), encodes them with the hand codec into one list and hands the batch, joined into ONE
buffer, to its ``DeliveryTarget`` (the channel), which writes it with one ``transport.write``
after any replies queued before it (one buffer is far cheaper for the transport than thousands
of small pieces). Per turn, not per message: one ``can_deliver`` check, one
``take_delivery_tags`` call (the tags go into the channel's unacked table in one C-level
update) and one write. It stops while the transport asks us to pause writing, so a slow client
cannot make the server buffer unbounded data. An ``x-stream-filter-sql`` consumer passes its
compiled predicate (and, for a registered subscription, the chunk-bits check) to the reader; a
named consumer reports each delivery to its ``OffsetTracker``. Read counters go to the queue's
``filter_stats``.
"""

from __future__ import annotations

import contextlib
import logging
import struct
from collections.abc import Callable

from sievemq.amqp import hotcodec
from sievemq.filtering.sql import SqlFilter
from sievemq.gateway.model.stream.arguments import ConsumerOptions, OffsetSpec
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.runtime.stream.waker import CommitWaker
from sievemq.gateway.session.ports import DeliveryTarget
from sievemq.gateway.session.stream.filter_stats import ConsumerFilterStats
from sievemq.gateway.session.stream.named_consumers import OffsetTracker
from sievemq.storage import FilterSpec, FilterStats, Record, StorageError, Stream, StreamReader
from sievemq.streamproto.convert import to_amqp091

log = logging.getLogger(__name__)


def position_reader(reader: StreamReader, spec: OffsetSpec) -> None:
    """Attach a reader where ``x-stream-offset`` says (docs/compatibility.md "Consuming"; clamping
    is storage's)."""
    kind = spec.kind
    if kind == "first":
        reader.seek_first()
    elif kind == "last":
        reader.seek_last()
    elif kind == "next":
        reader.seek_next()
    elif kind == "offset":
        reader.seek_offset(spec.value)
    else:
        reader.seek_timestamp(spec.value)


def filter_spec(options: ConsumerOptions) -> FilterSpec | None:
    """The storage filter for the consumer's ``x-stream-filter`` arguments, if any."""
    if not options.values:
        return None
    return FilterSpec(
        values=options.values,
        match_unfiltered=options.match_unfiltered,
        match_all=options.match_all,
    )


class StreamConsumer(CommitWaker):
    """One basic.consume on a stream queue (a ``ports.ChannelConsumer``, so a
    ``model.stream.queue.ConsumerInfo``), delivering through its channel (a
    ``ports.DeliveryTarget``)."""

    __slots__ = (
        "_batch",
        "_encoder",
        "_reader",
        "chunk_filter",
        "credit",
        "delivered",
        "predicate",
        "prefetch",
        "queue",
        "spec",
        "sql",
        "stats",
        "tag",
        "target",
        "tracker",
    )

    def __init__(
        self,
        target: DeliveryTarget,
        tag: str,
        queue: StreamQueue,
        stream: Stream,
        reader: StreamReader,
        prefetch: int,
        spec: FilterSpec | None,
        batch: int,
        *,
        sql: SqlFilter | None = None,
        predicate: Callable[[Record], bool] | None = None,
        chunk_filter: Callable[[bytes], bool] | None = None,
        tracker: OffsetTracker | None = None,
    ) -> None:
        self.target = target
        self.tag = tag
        self.queue = queue
        self.prefetch = prefetch
        self.credit = prefetch
        self.spec = spec
        self.delivered = 0
        self._init_waker(stream)
        self._reader = reader
        self._batch = batch
        # frame_max is fixed once a channel is open (tune-ok comes before connection.open-ok)
        self._encoder = hotcodec.DeliveryEncoder(target.delivery_id, tag, target.frame_max)
        self.sql = sql
        self.predicate = predicate
        self.chunk_filter = chunk_filter
        self.tracker = tracker
        self.stats = ConsumerFilterStats(reader.stats, queue.filter_stats, sql)

    # ------------------------------------------------------- model.stream.queue.ConsumerInfo

    @property
    def channel_id(self) -> int:
        return self.target.id

    @property
    def connection_id(self) -> int:
        return self.target.connection_id

    def filter_stats(self) -> FilterStats:
        return self.stats.snapshot()

    @property
    def consumer_name(self) -> str | None:
        return self.tracker.name if self.tracker is not None else None

    @property
    def sql_text(self) -> str | None:
        return self.sql.text if self.sql is not None else None

    @property
    def position(self) -> int:
        return self._reader.position

    def cancel_by_server(self) -> None:
        self.target.cancel_consumer_by_server(self)

    # ------------------------------------------------------------------ delivering

    def start(self) -> None:
        """Begin delivering (after consume-ok has been written)."""
        self.listen()
        self.wake()

    def count_acks(self, n: int) -> None:
        self.queue.acked += n

    def give_credit(self, n: int) -> None:
        was = self.credit
        self.credit = min(self.prefetch, was + n)
        if was <= 0 < self.credit:
            self.wake()

    def _run(self) -> None:
        self._scheduled = False
        if not self.active or self.credit <= 0:
            return
        target = self.target
        if not target.can_deliver():
            return  # the connection wakes every consumer when it can write again
        reader = self._reader
        try:
            records = reader.read(
                min(self.credit, self._batch),
                self.spec,
                self.predicate,
                chunk_filter=self.chunk_filter,
            )
        except (StorageError, OSError, ValueError, struct.error) as error:
            # struct.error: a truncated or corrupt record that storage did not catch; the
            # consumer is cancelled (basic.cancel if the client asked) instead of stalling
            log.error("consumer %s: read failed: %s", self.tag, error)
            target.cancel_consumer_by_server(self)
            return
        tracker = self.tracker
        if not records:
            if tracker is not None:
                tracker.moved()
            self.stats.account(0, 0)
            if not reader.at_end:
                self.wake()  # the scan budget ran out: continue next tick, let others run
            return  # else: idle until the stream's listener reports a commit
        n = len(records)
        first = target.take_delivery_tags(self, n)
        if tracker is not None:
            tag = first
            for r in records:
                tracker.delivered(tag, r.offset)
                tag += 1
            tracker.moved()
        out: list[bytes] = []
        encode = self._encoder.encode
        tag = first
        too_large: hotcodec.HeaderTooLarge | None = None
        # a Record unpacked in the loop header: one C-level unpack, not six attribute reads
        for offset, _, values, ex, rk, props, body, kind in records:
            try:
                if kind:  # a stream-protocol payload: AMQP 1.0 converted to 0-9-1
                    ex, rk, props, body = to_amqp091(body, self.queue.name, values)
                encode(out, tag, ex, rk, props, body, offset)
            except hotcodec.HeaderTooLarge as error:
                # a header frame cannot be split: deliver what came before it, then stop
                log.warning(
                    "consumer %s on %r: message at offset %d cannot be delivered: %s;"
                    " the consumer is cancelled (reconnect with a larger frame_max)",
                    self.tag,
                    self.queue.name,
                    offset,
                    error,
                )
                too_large = error
                n = tag - first
                break
            tag += 1
        if too_large is not None:
            if out:
                target.write_deliveries(b"".join(out))
            self.delivered += n
            target.cancel_consumer_by_server(self)
            return
        self.credit -= n
        self.delivered += n
        data = b"".join(out)
        target.write_deliveries(data)
        self.stats.account(n, len(data))
        if self.credit > 0:
            self.wake()

    def stop(self) -> None:
        """Stop delivering and release the reader."""
        if not self.active:
            return
        self.active = False
        if self.tracker is not None:
            self.tracker.flush()  # a reconnect right after cancel must see the commit
        self.unlisten()
        with contextlib.suppress(StorageError, OSError):
            self._reader.close()
