"""Stream replicas: each replica node follows its stream's leader through the Stream protocol.

A stream's etcd record names its ``replicas`` (``placement.choose_replicas``). On each of
those nodes a ``Follower`` keeps a copy of the stream in ``DATA_DIR/replicas/streams/...``
(storage's usual layout, apart from the node's own queues: the copy is no queue of this
node; Stream-protocol subscribers on this node read it, AMQP consumers do not yet). It
connects to the leader's advertised stream listener, logs in with the cluster secret (user
``cluster-link:NODE``, as the inter-node link: ``gateway/model/users.cluster_user``), subscribes
from its copy's end with ``sievemq-replica=true`` (each Deliver is one chunk exactly as the
leader stored it, Bloom bits and all) and appends every chunk as it came
(``Stream.append_stored``): the copy's segment files are byte-identical to the leader's. A
follower that loses its connection, or a node that restarts, resumes from its copy's end. A
stream deleted (its record deleted) loses its copies.

The stream's named-consumer offsets and registered SQL subscriptions come on the same
subscription (``gateway/streamproto_session/tracking``: the whole of each, then each change;
kept in the copy's own ``offsets.log`` and ``subscriptions.json``), and a
StoreOffset a client sends to this node goes to the leader on it (``store_offset``), so the
copy answers QueryOffset; its publisher sequences are in the data it copies.

Before each subscription a follower brings its copy to the cluster's epoch history (the
record's ``epochs``, ``cluster.epochs``): what it holds past the last offset of the epochs it
shares with the leader is cut (``Stream.truncate``: an old leader's chunks no majority took),
and the record's history is written beside the segments. A record whose epoch changes (a
failover: ``cluster.failover``) ends the follower's connection; it follows the new leader.

After each appended chunk (after its fdatasync under ``--fsync always``) the follower tells
the leader what its copy holds (``wire.REPLICA_HOLDS``: the epoch it follows, the copy's
end): the leader commits a chunk once a majority holds it (``cluster/commit.py``) and sends
its committed offset on the subscription (``wire.COMMITTED``): the copy is gated
(``Stream.gate``), so its readers here (AMQP consumers, Stream-protocol subscribers, the
Spark network mode) read up to what the leader committed, not up to the copy's end.

The follower asks the leader for a heartbeat every ``HEARTBEAT_S`` (Tune) and notes when it
last heard anything (``heard_at``): a copy that hears nothing from its running leader for
the lease's TTL counts it lost and stands in an election (``cluster.failover``); while its
tail stands it acknowledges no more than the tail (``cap``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sievemq.cluster.coordination import Event
from sievemq.cluster.epochs import common_end, history_of, read_history, write_history
from sievemq.cluster.placement import Placement, queue_of
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.definitions import decode_value
from sievemq.gateway.model.stream.arguments import stream_arguments_from_table
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.model.users import CLUSTER_USER_PREFIX
from sievemq.gateway.streamproto_session import tracking
from sievemq.storage import StorageError, layout
from sievemq.storage.durable import sync_and_close
from sievemq.storage.layout import stream_directory
from sievemq.storage.stream import Durability, Stream
from sievemq.streamproto import wire

log = logging.getLogger("sievemq.cluster")

REPLICAS_DIR = "replicas"
CREDIT = 32  # chunks in flight from the leader
RETRY_S = 1.0  # between attempts to reach the leader
HEARTBEAT_S = 1  # asked of the leader (Tune): a silent leader sends a heartbeat this often
_OSIRIS_HEADER = struct.Struct(">BBHIqQQIIII")  # docs/stream-protocol.md §3
_DATA_LENGTH = 8  # the data length's index in it


class ReplicaError(Exception):
    """The leader refused a step of following it, or broke the protocol."""


def replica_directory(data_dir: Path, vhost: str, name: str) -> Path:
    return stream_directory(Path(data_dir) / REPLICAS_DIR, vhost, name)


class Follower:
    """One stream's copy on this node, kept up with its leader until stopped."""

    def __init__(
        self,
        queue: StreamQueue,
        leader: Callable[[], tuple[str, int] | None],
        credentials: Callable[[], tuple[str, str]],
        record: Callable[[], dict[str, Any]] = dict,
    ) -> None:
        self.queue = queue  # the copy as Stream-protocol subscribers on this node read it
        self.stream = queue.stream
        self.vhost = queue.vhost
        self.name = queue.name
        self._leader = leader  # the leader's stream listener now (None: not running)
        self._credentials = credentials  # read at each login: the secret may change
        self._record = record  # the stream's etcd record now (its epoch and history)
        self.epoch = 0  # the record's epoch this follower last followed
        self.hold = False  # an election is on (``cluster.failover``): follow nobody
        # while this copy's tail stands as an election's candidate (``cluster.failover``):
        # (epoch, end) -- its acknowledgements in that epoch go no further than the tail,
        # so that no leader of that epoch commits what the election may not have counted
        self.cap: tuple[int, int] | None = None
        self.heard_at = asyncio.get_running_loop().time()  # the last frame from the leader
        self._wake = asyncio.Event()  # try the leader now (an election's hold lifted)
        self._writer: asyncio.StreamWriter | None = None
        self._corr = 0
        self._owed = 0  # chunks appended and not acknowledged yet (``_acknowledge``)
        self.connected = asyncio.Event()  # subscribed to the leader now
        queue.leader_of_copy = self  # StoreOffset on this node goes to the leader
        # its readers read what the leader committed (``wire.COMMITTED``), not its end
        self.stream.gate()
        self._leader_committed = 0  # the last committed offset the leader sent
        self.task: asyncio.Task[None] = asyncio.ensure_future(self._run())
        self._syncer: asyncio.Task[None] | None = None
        if self.stream.config.durability is Durability.BATCH:
            self._syncer = asyncio.ensure_future(self._sync_loop())

    async def stop(self) -> None:
        self.queue.notify_deleted()  # its subscribers here get MetadataUpdate
        for task in (self.task, self._syncer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self.stream.close()  # (syncs what was written since the last sync)

    async def _run(self) -> None:
        while True:
            where = None if self.hold else self._leader()
            if where is not None:
                try:
                    await self._follow(*where)
                except (OSError, EOFError, ReplicaError, StorageError, ValueError) as error:
                    # (EACCES on connect is a route that prohibits it: a partition)
                    log.info(
                        "replica of '%s' in vhost '%s', following %s:%d: %s",
                        self.name,
                        self.vhost,
                        *where,
                        error,
                    )
                finally:
                    self.connected.clear()
                    self._writer = None
            self._wake.clear()
            # (not ``wait_for``: on 3.11 a wake and a cancel (``stop``) in the same turn
            # loses the cancel, and ``stop`` would wait on this loop for good)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RETRY_S):
                    await self._wake.wait()

    @property
    def committed(self) -> int:
        """The committed offset the leader last sent (an election's floor: ``failover``)."""
        return self.stream.committed_offset

    def silent_for(self) -> float:
        """Seconds since the last frame from the leader (connected or not), or since this
        copy could try it again (``listen_anew``), whichever is later."""
        return asyncio.get_running_loop().time() - self.heard_at

    def listen_anew(self) -> None:
        """This copy may try its leader again (an election's hold lifted, the leader listed
        again after its lease lapsed): try it now, and count its silence from now. The time
        it could not try (held, or nobody to follow) is no sign the leader is lost: counted,
        a leader back after an etcd outage would be replaced by its replicas at once."""
        self.heard_at = max(self.heard_at, asyncio.get_running_loop().time())
        self._wake.set()

    def set_cap(self, cap: tuple[int, int] | None) -> None:
        """Set (or lift: None) the election's cap on what this copy acknowledges, and tell
        the leader what it holds now: an acknowledgement capped while a tail stood is not
        sent again by itself (the next chunk would; a publisher waiting for its confirm
        sends none), so a leader heard again after an election that chose nobody would hold
        its last publishes for good."""
        self.cap = cap
        writer = self._writer
        if writer is not None and self.connected.is_set() and not writer.is_closing():
            writer.write(wire.replica_holds(0, self.epoch, self.holds()))

    def holds(self) -> int:
        """What this copy acknowledges holding: its end, no further than an election's cap
        in the epoch it follows."""
        end = self.stream.end_offset
        cap = self.cap
        if cap is not None and cap[0] == self.epoch:
            return min(end, cap[1])
        return end

    def retarget(self) -> None:
        """The record changed (a new leader, a new epoch): drop the connection now; the
        next one goes where the record says, after the copy is brought to its history."""
        if self._writer is not None:
            self._writer.close()

    def follow_anew(self) -> None:
        """A new epoch's leader: follow it, and give it its own time to be heard from (the
        silence of the old one does not count against it)."""
        self.heard_at = asyncio.get_running_loop().time()
        self.retarget()

    def prepare(self) -> None:
        """Cut the copy back to the history it shares with the record's, and keep that."""
        record = self._record()
        self.epoch = int(record.get("epoch", 1))
        cluster = history_of(record.get("epochs"))
        directory = self.stream.directory
        end = self.stream.end_offset
        cut = common_end(read_history(directory), cluster, end)
        if cut < end:
            dropped = self.stream.truncate(cut)
            log.warning(
                "replica of '%s' in vhost '%s': %d messages past offset %d were never "
                "taken by the leader of epoch %d; dropped",
                self.name,
                self.vhost,
                dropped,
                cut,
                self.epoch,
            )
        if read_history(directory) != cluster:
            write_history(directory, cluster)

    async def _follow(self, host: str, port: int) -> None:
        self.prepare()
        self._owed = 0  # (what the last connection owed is moot: acknowledged anew below)
        reader, writer = await asyncio.open_connection(host, port)
        self._writer = writer
        try:
            await self._open(reader, writer)
            body = (
                struct.pack(">B", 0)
                + wire.enc_string(self.name)
                + struct.pack(">HQH", wire.OFFSET_OFFSET, self.stream.end_offset, CREDIT)
                + wire.enc_properties({"sievemq-replica": "true"})
            )
            await self._ok(reader, writer, wire.SUBSCRIBE, body, "Subscribe")
            # what it holds already (a leader that restarted learns it so)
            writer.write(wire.replica_holds(0, self.epoch, self.holds()))
            self.connected.set()
            log.info(
                "replica of '%s' in vhost '%s' follows %s:%d from offset %d",
                self.name,
                self.vhost,
                host,
                port,
                self.stream.end_offset,
            )
            loop = asyncio.get_running_loop()
            while True:
                key, version, frame = await _frame(reader)
                self.heard_at = loop.time()
                handler = _ON_FRAME.get(key)  # (other frames: nothing to do)
                if handler is not None:
                    await handler(self, writer, key, version, frame)
        finally:
            self._writer = None
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    # ------------------------------------------- the subscription's frames (``_ON_FRAME``)

    async def _on_deliver(
        self, writer: asyncio.StreamWriter, key: int, version: int, frame: bytes
    ) -> None:
        """A chunk: appended as the leader stored it, then the leader told what the copy
        holds (synced under always: the leader may commit it) with credit for one more:
        once for every chunk that came in the same read (``_acknowledge``)."""
        if self.hold:  # an election compares this copy's end: it stays put
            raise ReplicaError("an election is on")
        await self._append(frame, version)
        # what the leader committed may reach past the copy's end (a copy catching up):
        # commit clamps to the end, so commit again as it grows
        self.stream.commit(self._leader_committed)
        self._owed += 1
        if self._owed == 1:
            asyncio.get_running_loop().call_soon(self._acknowledge, writer)

    def _acknowledge(self, writer: asyncio.StreamWriter) -> None:
        """What the copy holds (no further than an election's cap: ``holds``), and credit
        for as many chunks as were appended since the last acknowledgement: one write when
        the follower has read every chunk that came (a copy catching up gets them many at a
        time: one write, and one wake of the leader, for all), not one per chunk."""
        owed, self._owed = self._owed, 0
        if owed and not writer.is_closing():
            writer.write(
                wire.replica_holds(0, self.epoch, self.holds())
                + wire.frame(wire.CREDIT, struct.pack(">BH", 0, owed))
            )

    async def _on_committed(
        self, writer: asyncio.StreamWriter, key: int, version: int, frame: bytes
    ) -> None:
        """The leader's committed offset: the copy's readers here may read up to it."""
        self._leader_committed = wire.parse_committed(frame)
        self.stream.commit(self._leader_committed)

    async def _on_tracking(
        self, writer: asyncio.StreamWriter, key: int, version: int, frame: bytes
    ) -> None:
        """Named-consumer offsets or registered SQL subscriptions: kept in the copy."""
        tracking.apply(self.stream, key, frame)

    async def _on_heartbeat(
        self, writer: asyncio.StreamWriter, key: int, version: int, frame: bytes
    ) -> None:
        writer.write(wire.heartbeat())

    async def _on_end(
        self, writer: asyncio.StreamWriter, key: int, version: int, frame: bytes
    ) -> None:
        """MetadataUpdate or Close: the leader ended the subscription (``_run`` retries)."""
        raise ReplicaError("the leader ended the subscription")

    async def _append(self, frame: bytes, version: int) -> None:
        """Append the Deliver's chunk as stored; under ``--fsync always`` the write and its
        fdatasync run in a worker thread, as the gateway's own appends do."""
        start = 1 + (8 if version >= 2 else 0) + _OSIRIS_HEADER.size
        length = _OSIRIS_HEADER.unpack_from(frame, start - _OSIRIS_HEADER.size)[_DATA_LENGTH]
        chunk = frame[start : start + length]
        if self.stream.config.durability is Durability.ALWAYS:
            await asyncio.to_thread(self.stream.append_stored, chunk)
        else:
            self.stream.append_stored(chunk)

    def store_offset(self, reference: str, offset: int) -> bool:
        """A client's StoreOffset on this node: sent to the leader on the subscription's
        connection (the cluster login may store any); it comes back as a tracking change."""
        writer = self._writer
        if writer is None or writer.is_closing() or not self.connected.is_set():
            return False  # (not subscribed yet: nothing but the handshake may go first)
        body = wire.enc_string(reference) + wire.enc_string(self.name) + struct.pack(">Q", offset)
        writer.write(wire.frame(wire.STORE_OFFSET, body))
        return True

    async def _sync_loop(self) -> None:
        """fdatasync as ``--fsync`` says: each append under ``always`` (the writer does
        it), what came in each sync interval under ``batch`` (in a worker thread, on
        duplicated descriptors, as the gateway syncs its streams), never under ``never``."""
        synced = self.stream.end_offset
        while True:
            await asyncio.sleep(self.stream.config.sync_interval_ms / 1000)
            end = self.stream.end_offset
            if end != synced:
                fds = self.stream.sync_handles()
                await asyncio.to_thread(sync_and_close, fds)
                synced = end

    async def _open(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        props = {"product": "sievemq-replica", "connection_name": f"replica of {self.name}"}
        await self._ok(
            reader, writer, wire.PEER_PROPERTIES, wire.enc_properties(props), "PeerProperties"
        )
        await self._ok(reader, writer, wire.SASL_HANDSHAKE, b"", "SaslHandshake")
        user, password = self._credentials()
        secret = b"\0" + user.encode() + b"\0" + password.encode()
        auth = wire.enc_string("PLAIN") + struct.pack(">i", len(secret)) + secret
        await self._ok(reader, writer, wire.SASL_AUTHENTICATE, auth, f"login as {user!r}")
        key, _, tune = await _frame(reader)
        if key != wire.TUNE:
            raise ReplicaError(f"expected Tune, got frame {key}")
        frame_max, _ = struct.unpack_from(">II", tune, 0)
        # heartbeats: a leader that sends nothing for the lease's TTL is lost to this copy
        # (``cluster.failover``), also when the connection stays open but carries nothing
        writer.write(wire.frame(wire.TUNE, struct.pack(">II", frame_max, HEARTBEAT_S)))
        await self._ok(reader, writer, wire.OPEN, wire.enc_string(self.vhost), "Open")

    async def _ok(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        key: int,
        body: bytes,
        what: str,
    ) -> None:
        self._corr += 1
        writer.write(wire.frame(key, struct.pack(">I", self._corr) + body))
        while True:
            got, _, frame = await _frame(reader)
            self.heard_at = asyncio.get_running_loop().time()
            if got == key | wire.RESPONSE:
                corr, code = struct.unpack_from(">IH", frame, 0)
                if corr != self._corr:
                    continue
                if code != wire.OK:
                    raise ReplicaError(f"{what} answered {code}")
                return
            if got == wire.CLOSE:
                raise ReplicaError(f"the leader closed the connection during {what}")


# what the follower does with each kind of frame on its subscription (others are ignored)
_ON_FRAME: dict[
    int, Callable[[Follower, asyncio.StreamWriter, int, int, bytes], Awaitable[None]]
] = {
    wire.DELIVER: Follower._on_deliver,
    wire.COMMITTED: Follower._on_committed,
    wire.TRACKING: Follower._on_tracking,
    wire.SUBSCRIPTIONS: Follower._on_tracking,
    wire.HEARTBEAT: Follower._on_heartbeat,
    wire.METADATA_UPDATE: Follower._on_end,
    wire.CLOSE: Follower._on_end,
}


async def _frame(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """(key, version, body) of the next frame."""
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    data = await reader.readexactly(size)
    key, version = struct.unpack_from(">HH", data, 0)
    return key, version, data[4:]


class Replication:
    """This node's followers: one per stream whose record names it a replica."""

    def __init__(
        self, placement: Placement, broker: Broker, secret: Callable[[], str | None]
    ) -> None:
        self.placement = placement
        self.broker = broker
        self.me = placement.me
        self.followers: dict[tuple[str, str], Follower] = {}
        self._dropping: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._secret = secret

    def _credentials(self) -> tuple[str, str]:
        """The cluster login (``cluster_user``): this node's name, the cluster secret."""
        return CLUSTER_USER_PREFIX + self.me, self._secret() or ""

    def apply(self, events: list[Event], reset: bool) -> None:
        """After ``Placement.apply`` (the records are current): start a follower for each
        stream this node replicates, stop those it no longer does; a stream whose record
        was deleted loses its copy here (not one that merely vanished from a reset view)."""
        deleted = {queue_of(e.kv.key) for e in events if e.kind == "delete"}
        wanted = {
            queue: record
            for queue, record in self.placement.records.items()
            if record.get("type", "stream") == "stream"
            and self.me in record.get("replicas", ())
            and record.get("leader") != self.me
            and not record.get("delete")
            and not self._held(*queue)  # led here until the failover hands it over
        }
        for queue in [q for q in self.followers if q not in wanted]:
            follower = self.followers[queue]
            self._pop(queue)
            # its record deleted or marked for deletion (a delete asked of the leader), or
            # this node taken off its members (``replica_ops``)
            remove = queue in deleted or self._removed(queue)
            task = asyncio.ensure_future(self._drop(follower, remove))
            self._dropping[queue] = task
            task.add_done_callback(functools.partial(self._dropped, queue))
        if reset:
            self._sweep()
        for queue, record in wanted.items():
            current = self.followers.get(queue)
            if current is not None and current.epoch != int(record.get("epoch", 1)):
                current.follow_anew()
            if queue not in self.followers and queue not in self._dropping:
                try:
                    self.followers[queue] = self._follower(queue, record)
                except (StorageError, OSError, ValueError) as error:
                    log.error("cannot keep a replica of '%s': %s", queue[1], error)

    def _held(self, vhost: str, name: str) -> bool:
        local = self.broker.vhosts.get(vhost)
        return local is not None and name in local.queues

    def _dropped(self, queue: tuple[str, str], task: asyncio.Future[None]) -> None:
        """A follower stopped (``_drop``): forget the drop; follow again if wanted."""
        if self._dropping.get(queue) is task:
            del self._dropping[queue]
            self.apply([], False)  # wanted again meanwhile (a failover and back)

    async def release(self, queue: tuple[str, str]) -> None:
        """Stop following the stream and close the copy (this node leads it now), or wait
        for that when the watch began it."""
        follower = self._pop(queue)
        if follower is not None:
            await follower.stop()
        dropping = self._dropping.get(queue)
        if dropping is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(dropping)

    def _removed(self, queue: tuple[str, str] | None) -> bool:
        record = self.placement.records.get(queue) if queue is not None else None
        if record is None:
            return False
        return bool(record.get("delete")) or self.me not in (
            record.get("leader"),
            *record.get("replicas", ()),
        )

    def _sweep(self) -> None:
        """Remove the copies of streams whose record no longer names this node (its replica
        removed while it was down); a copy without any record is kept (etcd may have lost
        its data: that copy may be the last)."""
        base = Path(self.broker.data_dir) / REPLICAS_DIR / layout.STREAMS_DIR
        for directory in base.glob("*/*"):
            vhost, name = layout.name_of(directory.parent.name), layout.name_of(directory.name)
            queue = None if vhost is None or name is None else (vhost, name)
            if queue is not None and queue not in self.followers and self._removed(queue):
                log.info("replica of '%s' in vhost '%s' removed: not a member", name, vhost)
                layout.discard(directory)

    def _follower(self, queue: tuple[str, str], record: dict[str, Any]) -> Follower:
        vhost, name = queue
        table = decode_value(record.get("arguments") or {})
        arguments = stream_arguments_from_table(dict(table), name, vhost)
        directory = replica_directory(self.broker.data_dir, vhost, name)
        directory.mkdir(parents=True, exist_ok=True)
        stream = Stream.open(directory, self.broker.stream_config(arguments))

        def leader() -> tuple[str, int] | None:
            current = self.placement.records.get(queue, {})
            return self.placement.stream_listener(str(current.get("leader")), False)

        def current() -> dict[str, Any]:
            return self.placement.records.get(queue, {})

        return Follower(
            StreamQueue(name, vhost, arguments, stream), leader, self._credentials, current
        )

    def _pop(self, queue: tuple[str, str]) -> Follower | None:
        """Stop keeping this follower; what its copy's readers did stays counted."""
        follower = self.followers.pop(queue, None)
        if follower is not None:
            self.broker.counters.retire("stream", follower.queue.read_stats())
        return follower

    def read_counts(self) -> dict[tuple[str, str], dict[str, int]]:
        """Deliveries and acks of this node's consumers of each copy it holds now
        (``MessageCounters.replica_reads``)."""
        return {queue: f.queue.read_stats() for queue, f in self.followers.items()}

    def queue(self, vhost: str, name: str) -> StreamQueue | None:
        """This node's replica of a stream, to read (``Placement.replica_of``)."""
        follower = self.followers.get((vhost, name))
        return None if follower is None else follower.queue

    async def _drop(self, follower: Follower, remove: bool) -> None:
        await follower.stop()
        if remove:
            follower.stream.delete()

    async def stop(self) -> None:
        for follower in self.followers.values():
            await follower.stop()
        self.followers.clear()
