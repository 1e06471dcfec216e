"""Quorum queue replicas: the leader ships its queue's log to each replica over the link.

A quorum queue's etcd record names its ``replicas`` (``x-quorum-initial-group-size``, default 3
or the number of nodes when fewer: ``Placement.choose_replicas``). Each replica node keeps a
**copy** of the queue's log in exactly the directory and format of a local durable quorum
queue of that name and vhost on that node (``layout.queue_directory``: ``DATA_DIR/queues/
VHOST/NAME``, a ``storage.queue_log.QueueLog``), written only through ``QueueLog``'s own
methods: promoting it is opening that queue there, whose recovery rebuilds its state.

**The feed.** A replica (``Follower``) opens a link channel to the leader
(``amqp/queue_feed.py``: ``FEED_TARGET``) and says HELLO with the next log id its copy lacks.
The leader (``Feed``, made by ``QuorumFeeds.quorum_feed``) first catches it up from the
queue's files (``storage.queue_log.Snapshot``, read in worker threads, one segment at a time:
the live records it lacks, then which of the ids it has are still live), then sends every
change of the log as the leader writes it (``Shipper``, the ``QueueLog``'s observer), in
order: each write's records at once (one batch per write: a turn's publishes, a read's
slice), the other changes batched per event-loop turn. What changes while it catches up is
kept and sent after. The operations (``encode_*``, applied by ``apply_ops``):

- ``E``: ``u32 size | record``: an enqueued record, the bytes the leader's segment holds
  (the copy stores them as they came, their checksum checked: ``stage_record``);
- ``A``: ``u32 n | n × u64 id``: settled (acked, rejected, expired, dead-lettered) ids;
- ``D``: ``u64 id``: the delivered mark (``QueueLog.flush_delivered``);
- ``P``: ``u64 floor``: a purge (every id at or below ``floor`` is gone);
- ``K``: ``u64 through | u32 n | n × (u64 first, u64 last)``: of the copy's ids at or below
  ``through``, only those in these runs are live (a catch-up: settlements it missed);
- ``C``: ``u32 n | n × (u64 id, u32 count << 1 | out)``: delivery counts (``QueueLog``'s
  ``counts`` record: a promoted copy keeps each message's ``x-delivery-count``); a
  catch-up sends the leader's whole record.

**Flow control.** A replica that reads slower than the leader's publishers write (stopped,
slow disk, a slow link) must not make the leader buffer without bound. Each feed sends only
while its link connection takes more (its transport's write buffer under the high-water
mark, ``FeedChannelEnd.paused``); meanwhile it keeps the changes, up to
``KEPT_BYTES``; past that it drops them and, once the link drains (``Feed.writable``),
catches the replica up from the leader's files again from the last record it sent, as a
HELLO would (Raft's leader reads a lagging follower's entries from its log likewise). A
catch-up sends a batch only while the link takes more. What the leader holds for one
replica is so bounded by the write buffer's high-water mark, one batch and ``KEPT_BYTES``.

Every operation is idempotent on the copy (a record at or below its last id is skipped, an id
it does not hold live is not acked again), so what the catch-up and the changes both carry is
applied once. After each batch (fdatasynced first under ``--fsync always``; under ``batch``
within the sync interval) the replica answers HOLDS with the next id it lacks: it holds every
live record below. The leader counts an enqueue committed once a majority holds it
(``cluster/commit.py``, which gates the ``ClassicQueue``: deliveries and confirms wait).

**Heartbeat.** A feed that carried nothing for half of ``QuorumFeeds.beat_s`` (at most a
third of the lease's TTL) carries a BEAT with the leader's committed end, so a replica hears
an idle queue's leader too: one that hears nothing on its feed for the TTL (``silent_for``,
only while it could try: ``listen_anew``) counts its running leader lost and stands in an
election (``cluster.failover``, as a stream's copy does); while its tail stands its HOLDS go
no further than the tail (``cap``). The committed end it heard is the floor an elected copy
may count as committed at once.

Only the messages a quorum queue logs are replicated (persistent ones: a transient message
lives in the leader's memory only, as on a single node).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
import struct
import threading
from collections.abc import Callable
from typing import Any

from sievemq.amqp import frames, queue_feed
from sievemq.amqp.errors import NotFound
from sievemq.cluster.coordination import Event
from sievemq.cluster.epochs import common_end, history_of, read_history, write_history
from sievemq.cluster.link import LinkChannel, Links
from sievemq.cluster.placement import Placement, queue_of
from sievemq.gateway.admin.views import QuorumCopyView
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.directory import FeedChannelEnd
from sievemq.storage import Durability, layout
from sievemq.storage.queue_log import (
    COUNT,
    QueueLog,
    Snapshot,
    checked_record_id,
    pack_count,
    read_counts,
    unpack_count,
)

log = logging.getLogger("sievemq.cluster")

RETRY_S = 1.0  # between attempts to reach the leader
BEAT_S = 1.0  # a feed that carried nothing for this long carries a BEAT (``beat_s``)
CATCH_UP_BYTES = 1 << 20  # records per OPS batch while catching up
KEPT_BYTES = 4 << 20  # changes kept for a replica whose link is backed up; then read again

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_RECORD_ID_AT = 8  # an encoded record's id follows its length and checksum
_RUN = struct.Struct(">QQ")
ENQUEUE, ACK, DELIVERED, PURGE, KEEP, COUNTS = b"E", b"A", b"D", b"P", b"K", b"C"
_ENQUEUE_BYTE = ENQUEUE[0]

Queue = tuple[str, str]


# ---------------------------------------------------------------------------- operations


def encode_records(records: list[bytes]) -> bytes:
    return b"".join(ENQUEUE + _U32.pack(len(r)) + r for r in records)


def encode_ack(ids: list[int]) -> bytes:
    return ACK + _U32.pack(len(ids)) + struct.pack(f">{len(ids)}Q", *ids)


def encode_delivered(msg_id: int) -> bytes:
    return DELIVERED + _U64.pack(msg_id)


def encode_purge(floor: int) -> bytes:
    return PURGE + _U64.pack(floor)


def encode_keep(through: int, runs: list[tuple[int, int]]) -> bytes:
    return KEEP + _U64.pack(through) + _U32.pack(len(runs)) + b"".join(_RUN.pack(*r) for r in runs)


def encode_counts(entries: list[tuple[int, int, bool]]) -> bytes:
    return COUNTS + _U32.pack(len(entries)) + b"".join(pack_count(*entry) for entry in entries)


class Copy:
    """A replica's copy of a quorum queue's log and the ids it holds live."""

    def __init__(self, directory: Any) -> None:
        self.log = QueueLog(directory)
        self.live = {found.message.id for found in self.log.scan()}

    @property
    def next_id(self) -> int:
        """The first log id the copy lacks (it holds every live record below it)."""
        return self.log.last_id + 1

    def apply_ops(self, data: bytes) -> None:
        """Apply a batch of operations (module docstring) in order; raises ValueError for a
        damaged batch (what came before it in the batch is applied)."""
        pos = 0
        end = len(data)
        try:
            while pos < end:
                op = data[pos : pos + 1]
                apply = _ON_OP.get(op)
                if apply is None:
                    raise ValueError(f"unknown operation {op!r}")
                pos = apply(self, data, pos + 1)
        except struct.error as error:
            raise ValueError(f"a damaged batch: {error}") from None
        finally:
            self.log.write_staged()

    # ------------------------------------- each operation at ``pos``: the position after it

    def _enqueue(self, data: bytes, pos: int) -> int:
        """HOT PATH (a replica's share of each message): this and the ``E`` operations right
        after it, each record checked (its checksum) and staged as it came, byte for byte
        as the leader's segment holds it (not decoded and encoded again)."""
        qlog = self.log
        live = self.live
        end = len(data)
        while True:
            size: int = _U32.unpack_from(data, pos)[0]
            pos += 4
            record = data[pos : pos + size]
            msg_id = checked_record_id(record)
            if msg_id is None:
                raise ValueError("a damaged record")
            if msg_id > qlog.last_id:
                qlog.last_id = msg_id
                qlog.stage_record(msg_id, record)
                live.add(msg_id)
            pos += size
            if pos >= end or data[pos] != _ENQUEUE_BYTE:
                return pos
            pos += 1  # the next ``E``

    def _ack(self, data: bytes, pos: int) -> int:
        n: int = _U32.unpack_from(data, pos)[0]
        ids = struct.unpack_from(f">{n}Q", data, pos + 4)
        self._settle([i for i in ids if i in self.live])
        return pos + 4 + 8 * n

    def _delivered(self, data: bytes, pos: int) -> int:
        (msg_id,) = _U64.unpack_from(data, pos)
        qlog = self.log
        qlog.write_staged()
        qlog.note_delivered(msg_id)
        qlog.flush_delivered()
        return pos + 8

    def _purge(self, data: bytes, pos: int) -> int:
        (floor,) = _U64.unpack_from(data, pos)
        qlog = self.log
        qlog.write_staged()
        if floor >= qlog.last_id:
            qlog.last_id = floor
            qlog.purge()
            self.live.clear()
        else:  # (never from a leader in order: its purge takes all it wrote)
            self._settle(sorted(i for i in self.live if i <= floor))
        return pos + 8

    def _counts(self, data: bytes, pos: int) -> int:
        (n,) = _U32.unpack_from(data, pos)
        pos += 4
        entries = []
        for _ in range(n):
            entry = unpack_count(data, pos)
            pos += COUNT.size
            if entry[0] in self.live:
                entries.append(entry)
        if entries:
            self.log.write_staged()
            self.log.record_counts(entries)
        return pos

    def _keep(self, data: bytes, pos: int) -> int:
        through: int = _U64.unpack_from(data, pos)[0]
        n: int = _U32.unpack_from(data, pos + 8)[0]
        pos += 12
        runs = [_RUN.unpack_from(data, pos + 16 * i) for i in range(n)]
        firsts = [r[0] for r in runs]
        gone = []
        for msg_id in sorted(self.live):
            if msg_id > through:
                break
            i = bisect.bisect_right(firsts, msg_id) - 1
            if i < 0 or runs[i][1] < msg_id:
                gone.append(msg_id)
        self._settle(gone)
        return pos + 16 * n

    def _settle(self, ids: list[int]) -> None:
        if ids:
            self.log.write_staged()
            self.live.difference_update(ids)
            self.log.ack(ids)

    def close(self) -> None:
        self.log.close()


# what ``Copy.apply_ops`` does with each operation
_ON_OP: dict[bytes, Callable[[Copy, bytes, int], int]] = {
    ENQUEUE: Copy._enqueue,
    ACK: Copy._ack,
    DELIVERED: Copy._delivered,
    PURGE: Copy._purge,
    COUNTS: Copy._counts,
    KEEP: Copy._keep,
}


# ---------------------------------------------------------------------------- the leader


class Shipper:
    """The log observer of one quorum queue this node leads: each turn's changes, encoded
    once, go to every feed (``storage.queue_log.LogObserver``).

    The log tells it of a change from whichever thread made it: the appender's fdatasync
    runs ``QueueLog.sync`` in a worker thread, which writes the delivery counts noted since
    the last write (``counted``). So a change is queued under a lock and the flush is
    scheduled on the loop thread-safely. (Scheduling it with ``get_running_loop`` from the
    worker raised there after marking the flush scheduled: the shipper never flushed again
    and every replica of the queue stopped getting changes, for good and without a word;
    the chaos suite's consumer that gives messages back found it.)"""

    def __init__(self, queue: ClassicQueue, qlog: QueueLog) -> None:
        self.queue = queue
        self.log = qlog
        self.feeds: set[Feed] = set()
        self.through = qlog.last_id  # the last record written (and so shipped)
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._scheduled = False
        qlog.observer = self

    def records_written(self, records: list[bytes]) -> None:
        if records:
            self.through = max(self.through, _U64.unpack_from(records[-1], _RECORD_ID_AT)[0])
        self._add(encode_records(records), now=True)

    def acked(self, ids: list[int]) -> None:
        self._add(encode_ack(ids))

    def delivered(self, msg_id: int) -> None:
        self._add(encode_delivered(msg_id))

    def purged(self, floor: int) -> None:
        self._add(encode_purge(floor))

    def counted(self, entries: list[tuple[int, int, bool]]) -> None:
        self._add(encode_counts(entries))

    def _add(self, op: bytes, now: bool = False) -> None:
        """Queue ``op`` for the feeds; ``now`` (records just written, on the loop): send
        it, and what was queued before it, at once. The replicas start writing while this
        turn goes on (their HOLDS, so the confirms, come sooner), and a turn of several
        writes (a read's slices) still sends one batch for each write."""
        if not self.feeds:
            return
        on_loop = threading.get_ident() == self._loop_thread
        with self._lock:
            self._pending.append(op)
            if not (now and on_loop):
                if self._scheduled:
                    return
                self._scheduled = True
        if now and on_loop:  # (a flush scheduled before finds nothing left)
            try:
                self._flush()
            except Exception:  # the writer that wrote the records must not fail for it
                log.exception("shipping quorum queue %r to its replicas", self.queue)
        elif on_loop:
            self._loop.call_soon(self._flush)
        else:  # (a worker thread: wakes the loop)
            self._loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._lock:
            self._scheduled = False
            data = b"".join(self._pending)
            self._pending = []
        if data:
            for feed in list(self.feeds):
                feed.send(data, self.through)

    def detach(self) -> None:
        if self.log.observer is self:
            self.log.observer = None
        for feed in list(self.feeds):
            feed.end()


class Feed:
    """The leader's end of one replica's feed channel (``directory.FeedPeer``).

    Live, it sends each turn's changes at once. Catching up, or while its link is backed
    up, it keeps them (``kept``) and sends them once caught up and the link takes more;
    past ``KEPT_BYTES`` it drops them (``lost``) and catches up again from ``sent_through``
    (module docstring, "Flow control")."""

    def __init__(self, feeds: QuorumFeeds, vhost: str, node: str, end: FeedChannelEnd) -> None:
        self.feeds = feeds
        self.vhost = vhost
        self.node = node
        self.name = ""
        self.end_of_channel = end
        self.shipper: Shipper | None = None
        self.live = False  # changes go out as they come
        self.kept: list[bytes] = []  # changes not sent yet, in order
        self.kept_bytes = 0
        self._kept_through = 0  # the last record among them
        self.lost = False  # changes were dropped: catch up again
        self.sent_through = 0  # the replica got every live record up to it
        self.catch_ups = 0
        self.sent_at = 0.0  # loop time of the last write to the replica (``beat``)
        self._writable = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def frame(self, payload: bytes) -> None:
        method = queue_feed.method_of(payload)
        if method == queue_feed.HELLO and self.shipper is None:
            _epoch, next_id, self.name = queue_feed.parse_hello(payload)
            shipper = self.feeds.shipper(self.vhost, self.name)
            if shipper is None:  # (the replica asks again after a while)
                raise NotFound(f"no quorum queue '{self.name}' in vhost '{self.vhost}' here")
            self.shipper = shipper
            shipper.feeds.add(self)
            self.sent_through = next_id - 1
            self._task = asyncio.ensure_future(self._pump(shipper, next_id - 1))
        elif method == queue_feed.HOLDS and self.shipper is not None:
            epoch, next_id = queue_feed.parse_holds(payload)
            self.feeds.held(self.vhost, self.name, self.node, epoch, next_id)

    def send(self, data: bytes, through: int) -> None:
        """A turn's changes, whose last record is ``through``."""
        if self.live:
            if not self.end_of_channel.paused():
                self._send_now(data)
                self.sent_through = through
                return
            self.live = False  # the link is backed up: keep, and send once it drains
            self._task = asyncio.ensure_future(self._pump(self.shipper, None))
        if self.lost:
            return
        self.kept.append(data)
        self.kept_bytes += len(data)
        self._kept_through = through
        if self.kept_bytes > KEPT_BYTES:  # read them from the log again instead
            self.kept, self.kept_bytes, self.lost = [], 0, True

    def writable(self) -> None:
        """The link's write buffer went under its low-water mark."""
        self._writable.set()

    async def _drained(self) -> None:
        while self.end_of_channel.paused():
            self._writable.clear()
            await self._writable.wait()

    async def _pump(self, shipper: Shipper | None, after: int | None) -> None:
        """Until live: a catch-up from ``after`` (or again, from what was sent, when kept
        changes were dropped), then the kept changes, each once the link takes more. Any
        failure ends the feed (the replica says HELLO again): a feed that never went live
        would leave its replica behind for good, silently."""
        try:
            await self._pump_once(shipper, after)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("feeding replica on %s of quorum queue '%s'", self.node, self.name)
            self.end()

    async def _pump_once(self, shipper: Shipper | None, after: int | None) -> None:
        while shipper is not None:
            if after is not None:
                self.lost = False
                self.kept, self.kept_bytes = [], 0  # (the catch-up sends what they held)
                through = await self._catch_up(shipper, after)
                if through is None:
                    return
                self.sent_through = through
            await self._drained()
            if self.lost:
                after = self.sent_through
                continue
            kept, self.kept, self.kept_bytes = self.kept, [], 0
            if kept:
                self._send_now(b"".join(kept))
                self.sent_through = max(self.sent_through, self._kept_through)
            self.live = True
            return

    async def _catch_up(self, shipper: Shipper, after: int) -> int | None:
        """Send the live records above ``after`` from the log's files, and which of those at
        or below it are live, the delivered mark and the counts; the last record id it
        read through (None when the files could not be read: the feed ends)."""
        qlog = shipper.log
        qlog.write_staged()
        snapshot = Snapshot(qlog.directory, after, qlog.last_id)
        self.catch_ups += 1
        try:
            await asyncio.to_thread(snapshot.open)
            runs: list[tuple[int, int]] = []
            batch: list[bytes] = []
            size = 0
            for first in snapshot.firsts:
                kept, records = await asyncio.to_thread(snapshot.segment, first)
                runs += kept
                for record in records:
                    batch.append(record)
                    size += len(record)
                    if size >= CATCH_UP_BYTES:
                        self._send_now(encode_records(batch))
                        batch, size = [], 0
                        await self._drained()
            # the mark as far as the records sent go: a mark read past them would make a
            # copy that restarts before the changes that follow skip those records (a
            # delivery past them is among the changes kept meanwhile, sent next)
            delivered = min(snapshot.delivered, snapshot.through)
            counts = await asyncio.to_thread(read_counts, qlog.directory)
            self._send_now(
                encode_records(batch)
                + encode_keep(after, runs)
                + encode_delivered(delivered)
                + encode_counts([(i, c, out) for i, (c, out) in sorted(counts.items())])
            )
        except OSError as error:
            log.error("catching up replica on %s of '%s': %s", self.node, self.name, error)
            self.end()
            return None
        log.info(
            "replica on %s of quorum queue '%s' in vhost '%s' caught up from id %d",
            self.node,
            self.name,
            self.vhost,
            after + 1,
        )
        return snapshot.through

    def _send_now(self, data: bytes) -> None:
        end = self.end_of_channel
        end.write(queue_feed.ops(end.channel, data, end.frame_max))
        self.sent_at = asyncio.get_running_loop().time()

    def beat(self, now: float, quiet_s: float) -> None:
        """A BEAT with the committed end when nothing went to the replica for ``quiet_s``:
        its silence is how it tells a leader cut from it (``cluster/failover.py``)."""
        shipper = self.shipper
        if shipper is None or now - self.sent_at < quiet_s:
            return
        queue = shipper.queue
        committed = queue.commit_end if queue.commit_end is not None else shipper.log.last_id + 1
        end = self.end_of_channel
        end.write([queue_feed.beat(end.channel, committed)])
        self.sent_at = now

    def end(self) -> None:
        """Stop feeding (the queue is gone here): the replica asks again later."""
        self.close()
        self.end_of_channel.close(
            f"quorum queue '{self.name}' in vhost '{self.vhost}' is gone here"
        )

    def close(self) -> None:
        if self.shipper is not None:
            self.shipper.feeds.discard(self)
            self.shipper = None
        if self._task is not None and not self._task.done():
            self._task.cancel()


class QuorumFeeds:
    """The shippers of the quorum queues this node leads (``directory.QuorumFeeds``)."""

    def __init__(
        self,
        broker: Broker,
        held: Callable[[str, str, str, int, int], None],
        beat_s: float = BEAT_S,
    ) -> None:
        self.broker = broker
        self.held = held  # a replica's HOLDS: commit by majority (``Commits.held``)
        self.shippers: dict[Queue, Shipper] = {}
        # a feed is heard from at least this often, idle or not (at most a third of the
        # lease's TTL: a replica counts its leader lost after a TTL of silence)
        self.beat_s = beat_s
        self._beating: asyncio.TimerHandle | None = None

    def quorum_feed(self, vhost: str, node: str, end: FeedChannelEnd) -> Feed:
        if self._beating is None:
            self._beat()
        return Feed(self, vhost, node, end)

    def _beat(self) -> None:
        """Every ``beat_s / 2``: a BEAT on each feed quiet for half of it (so none is
        quiet for longer than ``beat_s``)."""
        loop = asyncio.get_running_loop()
        self._beating = loop.call_later(self.beat_s / 2, self._beat)
        now = loop.time()
        for shipper in self.shippers.values():
            for feed in list(shipper.feeds):
                feed.beat(now, self.beat_s / 2)

    def shipper(self, vhost: str, name: str) -> Shipper | None:
        """The shipper of a durable quorum queue this node holds (made on first use)."""
        local = self.broker.vhosts.get(vhost)
        queue = None if local is None else local.classic.queues.get(name)
        if queue is None or queue.kind != "quorum" or queue.log is None or queue.deleted:
            return None
        found = self.shippers.get((vhost, name))
        if found is not None and found.queue is queue:
            return found
        if found is not None:
            found.detach()
        shipper = self.shippers[(vhost, name)] = Shipper(queue, queue.log)
        queue.add_delete_listener(lambda q: self._deleted((vhost, name), shipper))
        return shipper

    def _deleted(self, key: Queue, shipper: Shipper) -> None:
        shipper.detach()
        if self.shippers.get(key) is shipper:
            del self.shippers[key]

    def stop(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
            self._beating = None
        for shipper in self.shippers.values():
            shipper.detach()
        self.shippers.clear()


# ---------------------------------------------------------------------------- a replica


class Follower:
    """This node's copy of one quorum queue, fed by its leader until stopped."""

    def __init__(
        self,
        vhost: str,
        name: str,
        copy: Copy,
        links: Links,
        record: Callable[[], dict[str, Any]],
        running: Callable[[str], bool],
        durability: Durability,
        sync_interval_ms: int,
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.copy = copy
        self._links = links
        self._record = record  # the queue's etcd record now (leader, epoch)
        # whether a node runs now: a leader that does not is not tried (each failed try
        # lengthens the link's backoff to that node for every other user of the link)
        self._running = running
        self.durability = durability
        self._sync_s = sync_interval_ms / 1000
        self._channel: LinkChannel | None = None
        self._ended: asyncio.Event = asyncio.Event()
        self._ops: list[bytes] | None = None  # the OPS batch being received
        self._remaining = 0
        self._epoch = 1
        self._syncing: asyncio.Task[None] | None = None
        self.hold = False  # an election of this queue runs here: the copy's end stays put
        # while this copy's tail stands as an election's candidate (``cluster.failover``):
        # (epoch, end) -- its HOLDS in that epoch go no further than the tail
        self.cap: tuple[int, int] | None = None
        self.committed = 0  # the committed end the leader last sent (``BEAT``)
        self.heard_at = asyncio.get_running_loop().time()  # the last frame from the leader
        self._wake = asyncio.Event()  # try the leader now (``listen_anew``)
        self.task: asyncio.Task[None] = asyncio.ensure_future(self._run())
        self._syncer: asyncio.Task[None] | None = None
        if durability is Durability.BATCH:
            self._syncer = asyncio.ensure_future(self._sync_loop())

    async def _run(self) -> None:
        while True:
            self._wake.clear()  # (a wake from now on, during a feed too: try again at once)
            record = self._record()
            leader = record.get("leader")
            if leader and not self.hold and not record.get("delete") and self._running(str(leader)):
                self._epoch = int(record.get("epoch", 1))
                self.prepare(record)
                self._ended.clear()
                self._ops, self._remaining = None, 0
                channel = self._links.open_channel(
                    str(leader), self.vhost, self, target=queue_feed.FEED_TARGET
                )
                self._channel = channel
                channel.write(
                    queue_feed.hello(channel.number, self._epoch, self.copy.next_id, self.name)
                )
                await self._ended.wait()
                self._channel = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RETRY_S):
                    await self._wake.wait()

    def silent_for(self) -> float:
        """Seconds since the last frame from the leader on the feed (BEATs included), or
        since this copy could try it again (``listen_anew``), whichever is later."""
        return asyncio.get_running_loop().time() - self.heard_at

    def listen_anew(self) -> None:
        """This copy may try its leader again (an election's hold lifted, the leader listed
        again): try it now, and count its silence from now (the time it could not try is
        no sign the leader is lost)."""
        self.heard_at = max(self.heard_at, asyncio.get_running_loop().time())
        self._wake.set()

    def set_cap(self, cap: tuple[int, int] | None) -> None:
        """Set (or lift: None) the election's cap on what this copy acknowledges; lifted,
        tell the leader what it holds now (a HOLDS capped while the tail stood is not sent
        again by itself: a publisher waiting for its confirm sends nothing more)."""
        self.cap = cap
        if cap is None and self._channel is not None:
            self._acknowledge()

    def prepare(self, record: dict[str, Any]) -> None:
        """Before following: a copy holding entries past the history it shares with the
        record's (an old leader's last entries, taken after this node's tail was written or
        while it was away, which the elected leader never had) is copied afresh (a queue's
        log cannot be cut back as a stream is: ``quorum_failover``); then the record's
        history is kept beside the copy (its next tail names the right epoch)."""
        cluster = history_of(record.get("epochs"))
        directory = self.copy.log.directory
        end = self.copy.next_id
        cut = common_end(read_history(directory), cluster, end)
        if cut < end:
            log.warning(
                "replica of quorum queue '%s' in vhost '%s': its copy holds entries from id "
                "%d that the leader of epoch %d never took; copied afresh",
                self.name,
                self.vhost,
                cut,
                self._epoch,
            )
            self.copy.log.delete()
            self.copy = Copy(directory)
        if read_history(directory) != cluster:
            write_history(directory, cluster)

    def follow_anew(self) -> None:
        """A new epoch's leader: follow it, and give it its own time to be heard from."""
        self.heard_at = asyncio.get_running_loop().time()
        self.retarget()
        self._wake.set()

    def retarget(self) -> None:
        """The record changed (a new leader), or an election runs: stop feeding at once
        (nothing more is applied from this channel), then feed from where the record says."""
        channel = self._channel
        if channel is not None:
            self._channel = None
            channel.close()
        self._ended.set()

    # the link's receiver

    def link_frames(self, channel: LinkChannel, got: list[tuple[int, bytes]]) -> None:
        if channel is not self._channel:
            return
        self.heard_at = asyncio.get_running_loop().time()
        applied = False
        for ftype, payload in got:
            if ftype == frames.FRAME_METHOD and queue_feed.is_feed(payload):
                method = queue_feed.method_of(payload)
                if method == queue_feed.OPS:
                    self._ops, self._remaining = [], queue_feed.parse_ops_size(payload)
                elif method == queue_feed.BEAT:
                    self.committed = max(self.committed, queue_feed.parse_beat(payload))
                continue
            if ftype != frames.FRAME_BODY or self._ops is None:
                continue
            self._ops.append(payload)
            self._remaining -= len(payload)
            if self._remaining <= 0:
                data = b"".join(self._ops)
                self._ops = None
                try:
                    self.copy.apply_ops(data)
                except (ValueError, OSError) as error:
                    log.error("replica of quorum queue '%s': %s", self.name, error)
                    self.retarget()
                    return
                applied = True
        if applied:
            self._acknowledge()

    def link_closed(self, channel: LinkChannel, code: int, text: str) -> None:
        if channel is self._channel:
            if code:  # the leader answered (a stream's copy counts a refusal heard too)
                self.heard_at = asyncio.get_running_loop().time()
                log.info("replica of quorum queue '%s': %d %s", self.name, code, text)
            self._ended.set()

    def _acknowledge(self) -> None:
        """HOLDS: at once, or after the fdatasync under ``always`` (one at a time)."""
        if self.durability is not Durability.ALWAYS:
            self._send_holds()
        elif self._syncing is None:
            self._syncing = asyncio.ensure_future(self._sync_then_hold())

    async def _sync_then_hold(self) -> None:
        try:
            while True:
                next_id = self.copy.next_id
                await asyncio.to_thread(self.copy.log.sync)
                self._send_holds(next_id)
                if self.copy.next_id == next_id:
                    return
        finally:
            self._syncing = None

    def _send_holds(self, next_id: int | None = None) -> None:
        channel = self._channel
        if channel is not None:
            held = self.copy.next_id if next_id is None else next_id
            cap = self.cap
            if cap is not None and cap[0] == self._epoch:
                held = min(held, cap[1])  # (an election counts this copy's tail)
            channel.write(queue_feed.holds(channel.number, self._epoch, held))

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(self._sync_s)
            if self.copy.log.dirty:
                self.copy.log.dirty = False
                await asyncio.to_thread(self.copy.log.sync)

    async def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()
        for task in (self.task, self._syncer, self._syncing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(OSError):
            self.copy.log.sync()
        self.copy.close()


class QuorumReplication:
    """This node's quorum-queue copies: one ``Follower`` per queue whose record names it a
    replica (a watch subscriber of ``sievemq/queues/``, after ``Placement.apply``)."""

    def __init__(self, placement: Placement, broker: Broker, links: Links) -> None:
        self.placement = placement
        self.broker = broker
        self.links = links
        self.me = placement.me
        self.followers: dict[Queue, Follower] = {}
        self._tasks: set[asyncio.Future[None]] = set()
        # copies being stopped (and removed): one wanted again meanwhile (a member removed
        # and added back at once) is opened once that is done, not beside it on the same
        # files, which the removal would then take from under it
        self._dropping: dict[Queue, asyncio.Future[None]] = {}

    def apply(self, events: list[Event], reset: bool) -> None:
        deleted = {queue_of(e.kv.key) for e in events if e.kind == "delete"}
        wanted = {
            queue: record
            for queue, record in self.placement.records.items()
            if self._wants(queue, record)
        }
        dropped = [q for q in self.followers if q not in wanted]
        for queue in dropped:
            follower = self.followers.pop(queue)
            remove = queue in deleted or self._removed(queue)
            task = self._dropping[queue] = self._track(self._drop(follower, remove))
            task.add_done_callback(functools.partial(self._dropped, queue))
        for gone in deleted - {*dropped, *wanted}:
            if gone is not None and not self._held(*gone):
                self._track(self._discard(gone))
        for queue, record in wanted.items():
            current = self.followers.get(queue)
            if current is not None and current._epoch != int(record.get("epoch", 1)):
                current.follow_anew()
            if queue not in self.followers:
                dropping = self._dropping.get(queue)
                if dropping is not None and not dropping.done():
                    self._track(self._follow_after(queue, dropping))
                else:
                    self._follow(queue)

    def _dropped(self, queue: Queue, task: asyncio.Future[None]) -> None:
        if self._dropping.get(queue) is task:
            del self._dropping[queue]

    def _follow(self, queue: Queue) -> None:
        try:
            self.followers[queue] = self._follower(queue)
        except OSError as error:
            log.error("cannot keep a replica of quorum queue '%s': %s", queue[1], error)

    async def _follow_after(self, queue: Queue, dropping: asyncio.Future[None]) -> None:
        """Follow the queue once its previous copy is stopped and removed, if the record
        still names this node then (the next watch event acts on it otherwise)."""
        with contextlib.suppress(Exception):
            await asyncio.shield(dropping)
        if queue not in self.followers and self._wants(queue, self.placement.records.get(queue)):
            self._follow(queue)

    def _wants(self, queue: Queue, record: dict[str, Any] | None) -> bool:
        """Whether the record names this node a replica of a quorum queue it does not hold
        as its own."""
        return (
            record is not None
            and record.get("type") == "quorum"
            and self.me in record.get("replicas", ())
            and record.get("leader") != self.me
            and not record.get("delete")
            and not self._held(*queue)
        )

    def _follower(self, queue: Queue) -> Follower:
        vhost, name = queue
        directory = layout.queue_directory(self.broker.data_dir, vhost, name)
        settings = self.broker.settings

        def record() -> dict[str, Any]:
            return self.placement.records.get(queue, {})

        def running(node: str) -> bool:
            found = self.placement.members(vhost, name)
            return found is not None and node in found[1]

        log.info("replica of quorum queue '%s' in vhost '%s' in %s", name, vhost, directory)
        return Follower(
            vhost,
            name,
            Copy(directory),
            self.links,
            record,
            running,
            settings.durability,
            settings.sync_interval_ms,
        )

    def _held(self, vhost: str, name: str) -> bool:
        local = self.broker.vhosts.get(vhost)
        return local is not None and name in local.classic.queues

    def _removed(self, queue: Queue) -> bool:
        record = self.placement.records.get(queue)
        return (
            record is None
            or bool(record.get("delete"))
            or self.me
            not in (
                record.get("leader"),
                *record.get("replicas", ()),
            )
        )

    async def _drop(self, follower: Follower, remove: bool) -> None:
        await follower.stop()
        if remove:
            follower.copy.log.delete()

    async def _discard(self, queue: Queue) -> None:
        """A deleted queue's copy left from before this node started following it."""
        directory = layout.queue_directory(self.broker.data_dir, *queue)
        if directory.exists() and queue not in self.followers:
            layout.discard(directory)

    def _track(self, work: Any) -> asyncio.Future[None]:
        task: asyncio.Future[None] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def copy_view(self, vhost: str, name: str) -> QuorumCopyView | None:
        """This node's copy of the queue, as ``quorum_status`` lists it (None: none)."""
        follower = self.followers.get((vhost, name))
        if follower is None:
            return None
        qlog = follower.copy.log
        return QuorumCopyView(log_end=qlog.last_id, messages=qlog.live_count)

    async def release(self, queue: Queue) -> None:
        """Stop following the queue and close the copy (to open it as this node's)."""
        follower = self.followers.pop(queue, None)
        if follower is not None:
            await follower.stop()

    async def stop(self) -> None:
        for follower in self.followers.values():
            await follower.stop()
        self.followers.clear()
