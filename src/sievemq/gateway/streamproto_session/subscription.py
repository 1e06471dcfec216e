"""A stream-protocol subscription: reads its own StreamReader, writes Deliver frames on credit.

HOT PATH. Credit counts chunks (Subscribe's initial credit, +n per Credit frame, -1 per
Deliver). Each turn reads matching records, cuts them into Deliver chunks (contiguous
offsets, one timestamp, each within the client's frame_max) and writes all of the turn's
Deliver frames with ONE ``transport.write``; a Deliver is never split by another frame.

Filtering is exact by default: with ``filter.N`` properties only the matching records are
sent (the reader skips chunks by their Bloom filter without reading them, as on AMQP, and
drops non-matching records of the chunks it reads), so one stored chunk may go out as several
Deliver chunks. With the subscribe property ``sievemq-whole-chunks=true`` a chunk the Bloom
filter lets through is sent whole, as RabbitMQ does (``WholeChunks``); clients post-filter
either way. With ``sievemq-stored-chunks=true`` (Spark's network reader) Deliver carries the
stored chunks in SieveMQ's record-table layout instead of AMQP 1.0 entries (``stored_chunks``):
filter values, exchange, routing key and 0-9-1 properties arrive as stored, for the columnar
decode; Bloom-skipping as with whole chunks, the exact filtering is the client's.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from typing import TYPE_CHECKING

from sievemq.gateway.runtime.stream.waker import CommitWaker
from sievemq.gateway.session.stream.filter_stats import ConsumerFilterStats
from sievemq.storage import FilterSpec, FilterStats, Record, StorageError, Stream, StreamReader
from sievemq.storage.chunk import (
    decode_records,
    length_prefixed_runs,
    osiris_runs,
    table_runs,
)
from sievemq.storage.reader import RawChunk
from sievemq.storage.types import KIND_STREAM
from sievemq.streamproto import convert, osiris, wire

if TYPE_CHECKING:
    from sievemq.gateway.model.stream.queue import StreamQueue
    from sievemq.gateway.streamproto_session.ports import ConnectionPort, GroupMember
    from sievemq.gateway.streamproto_session.tracking import SideFileShipping

log = logging.getLogger(__name__)

READ_BATCH = 4096  # records per reader call
MAX_TURN_BYTES = 4 * 1024 * 1024  # Deliver bytes written per turn before yielding
MAX_ENTRIES = 0xFFFF  # entries per chunk (u16 in the header)
# A replica's feed sending chunks a majority holds already (a copy catching up) works in the
# background: turns of at most CATCH_UP_TURN_BYTES (read CATCH_UP_READ chunks at a time),
# each followed by a pause, so that the leader's live work (publishes, the replicas that
# commit them, confirms) is not queued behind megabytes of history (``Subscription._run``).
# The share of the event loop those turns take adapts to the live load (``CatchUpPacer``):
# CATCH_UP_SHARE_MIN while the stream takes publishes or the loop runs late, doubling up
# to CATCH_UP_SHARE_MAX (no pause) with each turn that finds neither.
CATCH_UP_TURN_BYTES = 256 * 1024
CATCH_UP_READ = 4
CATCH_UP_SHARE_MIN = 0.1
CATCH_UP_SHARE_MAX = 1.0
CATCH_UP_LATE_S = 0.003  # a turn begun later than this after its time: the loop is busy


class CatchUpPacer:
    """When a copy's next catch-up turn may begin: after each turn a pause that leaves the
    turns ``share`` of the loop's time. The share falls to ``CATCH_UP_SHARE_MIN`` after a
    turn that found live load (the stream's end moved since the turn before: publishers
    are at work; or the turn began more than ``CATCH_UP_LATE_S`` after its time, the end
    of its pause or, with no pause, of the turn before: the loop, or the machine, is busy
    with other work) and doubles after a turn that found none, so a leader with no
    publishers ships the backlog at full speed and one with publishers gives it only a
    tenth of its loop. Times are ``time.perf_counter``'s."""

    __slots__ = ("_end", "_late", "_timed", "due", "share")

    def __init__(self) -> None:
        self.share = CATCH_UP_SHARE_MIN  # the first turns find out what the load is
        self.due = 0.0  # the next turn not before this
        self._end = -1  # the stream's end at the last turn
        self._timed = False  # the next turn follows on its own: its lateness is measured
        self._late = 0.0

    def wait(self, now: float) -> float:
        """Seconds before the next turn may begin; 0: it begins now."""
        left = self.due - now
        if left > 0:
            self._timed = True
            return left
        # (a turn woken by credit after an idle while, out of credit, is not late)
        self._late = now - self.due if self._timed else 0.0
        self._timed = False
        return 0.0

    def turn_done(self, started: float, ended: float, end_offset: int, goes_on: bool) -> None:
        """A turn ran from ``started`` to ``ended``; ``end_offset``: the stream's end;
        ``goes_on``: it scheduled the next (it had credit left and chunks to send)."""
        busy = self._late > CATCH_UP_LATE_S or end_offset != self._end
        self._end = end_offset
        if busy:
            self.share = CATCH_UP_SHARE_MIN
        else:
            self.share = min(CATCH_UP_SHARE_MAX, self.share * 2)
        self.due = ended + (ended - started) * (1 - self.share) / self.share
        self._timed = goes_on


class WholeChunks(FilterSpec):
    """Skip chunks by the Bloom filter like ``FilterSpec``, but keep every record of the
    chunks that may match (RabbitMQ's chunk-level filtering)."""

    def matches(self, filter_values: tuple[str, ...]) -> bool:
        return True


CONVERTED_PER_STREAM = 65536  # converted 0-9-1 records kept per stream, shared by subscribers

# stream -> offset -> the AMQP 1.0 encoding of that 0-9-1 record: every stream subscriber of
# the stream reuses it (a stored record never changes; a re-created stream is a new object)
_converted: weakref.WeakKeyDictionary[Stream, dict[int, bytes]] = weakref.WeakKeyDictionary()


def payload_of(record: Record, stream: Stream | None = None) -> bytes:
    """What a stream consumer receives for a stored record (AMQP 1.0 for 0-9-1 records),
    converted once per stream when ``stream`` is given."""
    if record.kind == KIND_STREAM:
        return record.body
    cache = None
    if stream is not None:
        cache = _converted.get(stream)
        if cache is None:
            cache = _converted[stream] = {}
        hit = cache.get(record.offset)
        if hit is not None:
            return hit
    out = convert.to_amqp10(record.exchange, record.routing_key, record.properties, record.body)
    if cache is not None:
        if len(cache) >= CONVERTED_PER_STREAM:
            del cache[next(iter(cache))]  # the oldest conversion
        cache[record.offset] = out
    return out


BUILT_BYTES_PER_STREAM = 8 * 1024 * 1024  # built wire chunks kept per stream

# (first offset, osiris chunk header, data section) in order: header + data is the part of
# a Deliver frame that is the same for every subscriber; data may be a view of stored bytes
Built = list[tuple[int, bytes, bytes | memoryview]]

# stream -> (chunk id, byte budget) -> that whole stored chunk in osiris layout, built once
# and shared by every subscriber that sends it whole; the oldest goes first
_built: weakref.WeakKeyDictionary[Stream, dict[tuple[int, int], Built]] = (
    weakref.WeakKeyDictionary()
)
_built_size: weakref.WeakKeyDictionary[Stream, int] = weakref.WeakKeyDictionary()


def _size(built: Built) -> int:
    return sum(len(h) + len(d) for _, h, d in built)


def wire_chunks(stream: Stream, raw: RawChunk, budget: int) -> Built | None:
    """The osiris chunks for the records ``raw.start ..`` of a stored chunk, each within
    ``budget`` bytes of entries (one stored chunk may need several), or None when it holds a
    0-9-1 record (those need converting: the record path). Whole chunks are built once per
    stream and budget (``_built``).

    A chunk stored in the osiris layout (``raw.osiris``: a batch of stream-protocol
    publishes) already holds the data section and its CRC: only the header is made here.
    Others are built by slicing the stored payloads (``length_prefixed_runs``)."""
    first = raw.first_offset
    whole = raw.start <= first
    key = (first, budget)
    cache = _built.get(stream)
    if whole and cache is not None:
        hit = cache.get(key)
        if hit is not None:
            return hit
    skip = 0 if whole else raw.start - first
    out: Built = []
    at = first + skip
    ts = raw.timestamp_ms
    if raw.osiris:
        for n, view, crc in osiris_runs(raw.data, raw.records, skip, budget, MAX_ENTRIES):
            out.append((at, osiris.header(at, n, ts, crc, len(view)), view))
            at += n
    else:
        runs = length_prefixed_runs(raw.data, raw.records, skip, budget, MAX_ENTRIES)
        if runs is None:
            return None
        for n, data in runs:
            out.append((at, osiris.chunk_header(at, n, ts, data), data))
            at += n
    if whole:
        if cache is None:
            cache = _built[stream] = {}
            _built_size[stream] = 0
        size = _built_size[stream] + _size(out)
        while cache and size > BUILT_BYTES_PER_STREAM:
            size -= _size(cache.pop(next(iter(cache))))
        cache[key] = out
        _built_size[stream] = size
    return out


def stored_chunks(raw: RawChunk, budget: int) -> Built:
    """Records ``raw.start ..`` of a stored chunk in the record-table layout, cut to the
    frame budget, each behind an osiris chunk header (its chunk id the run's first offset)."""
    first = raw.first_offset
    ts = raw.timestamp_ms
    out: Built = []
    for i, n, data in table_runs(raw.data, raw.records, raw.start - first, budget):
        out.append((first + i, osiris.chunk_header(first + i, n, ts, data), data))
    return out


NEXT = wire.OffsetSpec(wire.OFFSET_NEXT, 0)


def seek(reader: StreamReader, offset: wire.OffsetSpec) -> None:
    """Position a reader at a Subscribe offset specification."""
    kind = offset.kind
    if kind == wire.OFFSET_FIRST:
        reader.seek_first()
    elif kind == wire.OFFSET_LAST:
        reader.seek_last()
    elif kind == wire.OFFSET_NEXT:
        reader.seek_next()
    elif kind == wire.OFFSET_OFFSET:
        reader.seek_offset(offset.value)
    else:
        reader.seek_timestamp(offset.value)


class Subscription(CommitWaker):
    __slots__ = (
        "_built",
        "_by_chunk",
        "_chunks",
        "_marked",
        "_pacer",
        "_pending",
        "_reader",
        "conn",
        "credit",
        "delivered",
        "holding",
        "offset_spec",
        "properties",
        "queue",
        "sac",
        "spec",
        "stats",
        "stored",
        "subscription_id",
        "tracking",
        "verbatim",
    )

    def __init__(
        self,
        conn: ConnectionPort,
        subscription_id: int,
        queue: StreamQueue,
        reader: StreamReader,
        credit: int,
        spec: FilterSpec | None,
        offset_spec: wire.OffsetSpec = NEXT,
        stored: bool = False,
        verbatim: bool = False,
    ) -> None:
        self.conn = conn
        self.subscription_id = subscription_id
        self.queue = queue
        self._init_waker(queue.stream)
        self._reader = reader
        self.credit = credit
        self.spec = spec
        self.holding = False  # an inactive single active consumer: no delivery
        self.offset_spec = offset_spec  # as given at Subscribe
        self.sac: GroupMember | None = None
        self.delivered = 0
        self.properties: dict[str, str] = {}  # Subscribe's properties (for the admin API)
        self._pending: list[Record] = []
        # whole-chunk subscriptions (no filter, or WholeChunks) read undecoded chunks
        self._by_chunk = stored or verbatim or spec is None or isinstance(spec, WholeChunks)
        self.verbatim = verbatim  # sievemq-replica: chunks as stored, one per Deliver
        self.tracking: SideFileShipping | None = None  # a replica's: side files shipped too
        self.stored = stored  # sievemq-stored-chunks: the record-table layout on the wire
        self._marked = -1  # the last progress marker's offset (stored chunks only)
        self._chunks: list[RawChunk] = []  # read, not yet sent (reversed: pop() is next)
        self._built: Built | None = None  # the rest of chunks[-1] when credit ran out in it
        self._pacer: CatchUpPacer | None = None  # a copy catching up: when its turns go
        # the stream's filter counters (admin API, Prometheus, dashboard), as an AMQP
        # consumer's: the reader's work plus what was delivered, folded in once per turn;
        # a replica's feed is replication, not a consumer: the stream does not count it
        stream_stats = FilterStats() if verbatim else queue.filter_stats
        self.stats = ConsumerFilterStats(reader.stats, stream_stats)

    def filter_stats(self) -> FilterStats:
        """Its filter and delivery counters since it subscribed."""
        return self.stats.snapshot()

    def start(self) -> None:
        self.listen(self.verbatim)  # a replica's feed reads past the committed offset
        self.wake()

    def add_credit(self, n: int) -> None:
        was = self.credit
        self.credit = min(0xFFFF, was + n)
        if was <= 0 < self.credit:
            self.wake()

    @property
    def next_offset(self) -> int:
        """The offset of the next message this subscription would deliver."""
        if self._pending:
            return self._pending[0].offset
        if self._built:  # the rest of a stored chunk cut at the frame budget
            return self._built[0][0]
        if self._chunks:  # stored chunks read, not yet sent
            return self._chunks[-1].start
        return self._reader.position

    def activate(self, offset: wire.OffsetSpec | None) -> None:
        """Single active consumer: this one may deliver now, from ``offset`` (the client's
        ConsumerUpdate answer; None or type 0 keeps the Subscribe specification)."""
        if not self.active:
            return
        if offset is None or offset.kind == wire.OFFSET_NONE:
            offset = self.offset_spec
        try:
            seek(self._reader, offset)
        except (StorageError, OSError) as error:
            log.error(
                "subscription %s on %s: seek failed: %s",
                self.subscription_id,
                self.queue.name,
                error,
            )
            self.conn.drop_subscription(self, notify=True)
            return
        self._pending = []
        self._chunks = []
        self._built = None
        self.holding = False
        self.wake()

    def _run(self) -> None:
        self._scheduled = False
        conn = self.conn
        if (
            not self.active
            or self.holding
            or self.credit <= 0
            or conn.writing_paused
            or not conn.alive
        ):
            return
        reader = self._reader
        stream = self._stream
        turn_bytes = MAX_TURN_BYTES
        read_chunks = 64
        started = 0.0
        # a replica's copy catching up: what it lacks is committed already (a majority
        # holds it), so it goes in the background, paced (``CatchUpPacer``)
        pacer = None
        if self.verbatim and self.next_offset < stream.committed_offset:
            pacer = self._pacer
            if pacer is None:
                pacer = self._pacer = CatchUpPacer()
            started = time.perf_counter()
            wait = pacer.wait(started)
            if wait > 0:
                self._scheduled = True
                self._loop.call_later(wait, self._run)
                return
            turn_bytes = CATCH_UP_TURN_BYTES
            read_chunks = CATCH_UP_READ
        budget = conn.max_chunk_bytes
        sid = self.subscription_id
        version = conn.deliver_version
        # v2's committed chunk id; on a gated stream (commit by majority) the newest chunk may
        # not be committed: then the chunk delivered (committed, since it was read) says it
        committed = stream.last_chunk_id if version >= 2 and not stream.gated else 0
        out: list[bytes | memoryview] = []
        written = 0
        delivered = self.delivered
        credit = self.credit
        reads = 0
        try:
            chunks = self._chunks
            while credit > 0 and written < turn_bytes:
                records = self._pending
                if records:
                    self._pending = []
                elif chunks:
                    raw = chunks[-1]
                    built = self._built
                    if built is None and self.verbatim:
                        at, n, ts = raw.first_offset, raw.records, raw.timestamp_ms
                        built = [(at, osiris.chunk_header(at, n, ts, raw.data), raw.data)]
                    elif built is None and self.stored:
                        built = stored_chunks(raw, budget)
                    elif built is None:
                        built = wire_chunks(stream, raw, budget)
                        if built is None:  # a 0-9-1 record to convert: per record
                            chunks.pop()
                            records, _ = decode_records(
                                raw.data,
                                raw.records,
                                raw.first_offset,
                                raw.timestamp_ms,
                                raw.start,
                                None,
                                raw.osiris,
                            )
                            built = []
                    k = 0
                    nb = len(built)
                    while k < nb and credit > 0:
                        at, head, data = built[k]
                        size = len(head) + len(data)
                        frame = osiris.deliver_prefix(sid, size, version, max(committed, at))
                        out += (frame, head, data)
                        written += len(frame) + size
                        credit -= 1
                        k += 1
                    if built:
                        if k < nb:  # out of credit inside one stored chunk
                            self._built = built[k:]
                            self.delivered += built[k][0] - built[0][0]
                        else:
                            self._built = None
                            chunks.pop()
                            self.delivered += raw.first_offset + raw.records - built[0][0]
                    if not records:
                        continue
                elif reads < 2:
                    reads += 1
                    if self.verbatim:
                        got = reader.read_stored(min(credit, read_chunks))
                        if not got:
                            break
                        got.reverse()
                        chunks.extend(got)
                        continue
                    if self._by_chunk:
                        got = reader.read_chunks(READ_BATCH, self.spec, osiris=not self.stored)
                        if not got:
                            if self.stored and reader.position > self._marked:
                                # progress marker: a chunk of 0 records at the position says
                                # nothing below it is left to send (the Bloom filter skipped
                                # the rest), so a reader bounded by an offset knows it is done
                                self._marked = reader.position
                                head = osiris.chunk_header(reader.position, 0, 0, b"")
                                frame = osiris.deliver_prefix(sid, len(head), version, committed)
                                out += (frame, head)
                                written += len(frame) + len(head)
                                credit -= 1
                            break
                        stats = reader.stats  # read_chunks leaves the matched count to us
                        for c in got:
                            stats.records_matched += c.first_offset + c.records - c.start
                        got.reverse()
                        chunks.extend(got)
                        continue
                    records = reader.read(READ_BATCH, self.spec)
                    if not records:
                        break
                else:
                    break
                i = 0
                n = len(records)
                while i < n and credit > 0:
                    first = records[i]
                    expect = first.offset
                    ts = first.timestamp_ms
                    payloads: list[bytes] = []
                    size = 0
                    while i < n and len(payloads) < MAX_ENTRIES:
                        r = records[i]
                        if r.offset != expect or r.timestamp_ms != ts:
                            break
                        p = r.body if r.kind == KIND_STREAM else payload_of(r, stream)
                        if payloads and size + 4 + len(p) > budget:
                            break
                        payloads.append(p)
                        size += 4 + len(p)
                        expect += 1
                        i += 1
                    # v2's committed chunk id: the newest stored chunk, and never below the
                    # chunk in hand (one stored chunk may go out as several Deliver chunks)
                    frame = osiris.deliver(
                        sid, first.offset, ts, payloads, version, max(committed, first.offset)
                    )
                    out.append(frame)
                    written += len(frame)
                    credit -= 1
                    self.delivered += len(payloads)
                if i < n:
                    self._pending = records[i:]
        except (StorageError, OSError, ValueError) as error:
            log.error("subscription %s on %s: read failed: %s", sid, self.queue.name, error)
            self.credit = credit
            if out:
                conn.write_parts(out)
            self.stats.account(self.delivered - delivered, written)
            conn.drop_subscription(self, notify=True)
            return
        self.credit = credit
        if out:
            conn.write_parts(out)
        self.stats.account(self.delivered - delivered, written)
        more = credit > 0 and bool(self._pending or self._chunks or not reader.at_end)
        if pacer is not None:
            pacer.turn_done(started, time.perf_counter(), stream.end_offset, more)
        if more:
            self.wake()

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        if self.sac is not None:
            self.sac.leave()  # the group picks another member
        if self.tracking is not None:
            self.tracking.detach()
        self.unlisten()
        with contextlib.suppress(StorageError, OSError):
            self._reader.close()
