"""Commit by majority: the committed offset of each replicated stream this node leads.

A stream's members are its leader and the replicas its etcd record names. Each replica
tells the leader, on its subscription, what its copy holds (``REPLICA_HOLDS``: epoch and
the copy's next offset, sent after each appended chunk, after its fdatasync under
``--fsync always``). A chunk is **committed** once a majority of the members, the leader
included, holds it: the committed offset is the (majority - 1)-th highest offset the
replicas acknowledged (the leader holds everything it wrote). The leader's stream is
*gated* (``Stream.gate``): its readers stop at the committed offset and its appender holds
publisher confirms until the committed offset passes their chunk
(``gateway/runtime/stream/appender.py``). A stream with no replica is never gated: it
commits each chunk as it is written, exactly as a single node does.

A quorum queue with replicas commits the same way (``cluster/quorum_replication.py``): its
replicas acknowledge the next log id they lack, and its ``ClassicQueue`` is gated as a stream
is (deliveries and publisher confirms wait for the committed id).

An acknowledgement carries the epoch of the record the replica follows; one from another
epoch than the leader's record is ignored (failover, ``cluster/failover.py``, moves
epochs). A replica that disconnects keeps counting with what it acknowledged last: those
chunks are on its disk. A leader that restarts on its data starts from the committed
offset (or log id) it had when it stopped, kept beside its copy
(``storage/commit_mark.py``), not from all it holds: its last chunks may be held by no
replica, and a later election could cut them away after its readers saw them; the
acknowledgements its replicas send when they subscribe again commit the rest. A leader
promoted by an election (``cluster/failover.py``) starts from what the candidates' tails
show a majority holds (``promoted``). A queue with no replica commits everything as it is
written, before and after a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from sievemq.cluster.coordination import Event
from sievemq.cluster.placement import queue_of
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.storage import Stream

log = logging.getLogger("sievemq.cluster")

Queue = tuple[str, str]


def majority(members: int) -> int:
    """How many members make a majority (the leader counts)."""
    return members // 2 + 1


def committed_offset(held: list[int], members: int) -> int | None:
    """The highest offset a majority holds, from what the replicas acknowledged (``held``,
    any order; the leader holds more than any); None when too few replicas answered."""
    needed = majority(members) - 1  # replicas besides the leader
    if needed <= 0:
        return None  # (a single member commits everything: never gated)
    if len(held) < needed:
        return None
    return sorted(held, reverse=True)[needed - 1]


class Gated(Protocol):
    """What is gated for commit by majority: a ``Stream`` (offsets) or a quorum queue's
    ``ClassicQueue`` (log ids)."""

    def ungate(self) -> None: ...
    def commit(self, end: int) -> None: ...


class StreamCommit:
    """One gated stream (or quorum queue): its replicas and what each acknowledged."""

    __slots__ = ("acks", "epoch", "replicas", "stream")

    def __init__(self, stream: Gated, replicas: tuple[str, ...], epoch: int) -> None:
        self.stream = stream
        self.replicas = replicas
        self.epoch = epoch
        self.acks: dict[str, int] = {}

    def held(self, node: str, epoch: int, next_offset: int) -> None:
        """Replica ``node`` holds everything below ``next_offset`` (in ``epoch``)."""
        if epoch != self.epoch or node not in self.replicas:
            log.debug("ack of %s (epoch %d) for epoch %d ignored", node, epoch, self.epoch)
            return
        if next_offset <= self.acks.get(node, -1):
            return
        self.acks[node] = next_offset
        self.advance()

    def advance(self) -> None:
        held = [self.acks[n] for n in self.replicas if n in self.acks]
        offset = committed_offset(held, 1 + len(self.replicas))
        if offset is not None:
            self.stream.commit(offset)


class Commits:
    """The committed offsets of the streams this node leads with replicas."""

    def __init__(
        self, me: str, broker: Broker, records: Callable[[], dict[Queue, dict[str, Any]]]
    ) -> None:
        self.me = me
        self.broker = broker
        self.records = records  # the queue records as the watch has them
        self.streams: dict[Queue, StreamCommit] = {}
        self._pending: dict[Queue, tuple[tuple[str, ...], int]] = {}  # unopened, to gate
        self._floors: dict[Queue, int] = {}  # promoted streams: committed so far, to gate

    def lead(self, queue: Queue, record: dict[str, Any]) -> None:
        """The record of a stream (re)read: gate it when this node leads it with replicas,
        ungate it when it no longer has any (or is no longer this node's)."""
        replicas = tuple(str(n) for n in record.get("replicas", ()) if n != self.me)
        mine = record.get("leader") == self.me and not record.get("delete")
        if record.get("type", "stream") == "quorum":
            self._lead_quorum(queue, replicas, int(record.get("epoch", 1)), mine)
            return
        mine = mine and record.get("type", "stream") == "stream"
        local = self._local(queue)
        if not mine or local is None:
            self.drop(queue)  # another leader's now, or deleted: no confirm from here
            return
        if not replicas:
            self.forget(queue)
            # (a committed offset kept from an earlier gating goes: a later gating must
            # count all it holds, committed as a single member)
            local.on_first_open(_ungated)
            return
        epoch = int(record.get("epoch", 1))
        found = self.streams.get(queue)
        if found is not None and found.stream is local.opened_stream:
            found.replicas, found.epoch = replicas, epoch
            found.advance()
            return
        self.streams.pop(queue, None)
        if local.opened_stream is None:
            # a stream restored at start and not opened yet: gated when it opens
            first = queue not in self._pending
            self._pending[queue] = (replicas, epoch)
            if first:
                local.on_first_open(lambda stream: self._opened(queue, stream))
            return
        self._gate(queue, local.stream, replicas, epoch)

    def _lead_quorum(self, queue: Queue, replicas: tuple[str, ...], epoch: int, mine: bool) -> None:
        """``lead`` for a quorum queue: its ``ClassicQueue`` is gated as a stream is."""
        vhost = self.broker.vhosts.get(queue[0])
        local = None if vhost is None else vhost.classic.queues.get(queue[1])
        if not mine or local is None or local.log is None:
            self.drop(queue)
            return
        if not replicas:
            self.forget(queue)
            local.ungate()  # (as a stream's: a committed end kept from before goes)
            return
        found = self.streams.get(queue)
        if found is not None and found.stream is local:
            found.replicas, found.epoch = replicas, epoch
            found.advance()
            return
        local.gate(self._floors.pop(queue, None))
        self.streams[queue] = StreamCommit(local, replicas, epoch)

    def quorum_commit_end(self, vhost: str, name: str) -> int | None:
        """Where a gated quorum queue's committed ids end (None: not gated here)."""
        found = self.streams.get((vhost, name))
        target = None if found is None else found.stream
        return target.commit_end if isinstance(target, ClassicQueue) else None

    def declared(self, vhost: str, name: str) -> None:
        """The broker's hook (``Broker.stream_declared``): a stream declared here whose
        record says this node leads it (a promoted leader's, one another node placed here)
        is gated in the declare's own turn; the watch may have brought the record before
        the stream existed, and an ungated leader would confirm what no replica holds."""
        record = self.records().get((vhost, name))
        if record is not None and record.get("leader") == self.me:
            self.lead((vhost, name), record)

    def promoted(self, queue: Queue, floor: int) -> None:
        """This node is about to lead the stream (or quorum queue) since it won an election:
        when its declare gates it (``declared``; a quorum queue's ``lead``), what the
        election knows a majority holds (``floor``) is committed; the rest of its copy
        commits as the replicas acknowledge it, not at once (it may be an old leader's last
        chunks or entries that no majority took)."""
        self._floors[queue] = floor

    def _opened(self, queue: Queue, stream: Stream) -> None:
        wanted = self._pending.pop(queue, None)
        if wanted is not None:
            self._gate(queue, stream, *wanted)

    def _gate(self, queue: Queue, stream: Stream, replicas: tuple[str, ...], epoch: int) -> None:
        stream.gate(self._floors.pop(queue, None))
        self.streams[queue] = StreamCommit(stream, replicas, epoch)

    def drop(self, queue: Queue) -> None:
        """Stop tracking the stream and leave it gated: what it holds uncommitted is never
        confirmed here (a deposed leader's appender nacks it when it hands over)."""
        self._pending.pop(queue, None)
        self._floors.pop(queue, None)
        self.streams.pop(queue, None)

    def forget(self, queue: Queue) -> None:
        """A stream this node leads with no replica left: every chunk commits as written
        (what was held commits now)."""
        self._pending.pop(queue, None)
        self._floors.pop(queue, None)
        found = self.streams.pop(queue, None)
        if found is not None:
            found.stream.ungate()

    def held(self, vhost: str, name: str, node: str, epoch: int, next_offset: int) -> None:
        """A replica's acknowledgement (``REPLICA_HOLDS`` on its subscription)."""
        found = self.streams.get((vhost, name))
        if found is not None:
            found.held(node, epoch, next_offset)

    def apply(self, events: list[Event], reset: bool) -> None:
        """A watch subscriber of ``sievemq/queues/`` (after ``Placement.apply``: the
        records are current): re-read the records that changed (all of them on a reset)."""
        records = self.records()
        if reset:
            changed = set(records) | set(self.streams) | set(self._pending)
        else:
            changed = {q for q in (queue_of(e.kv.key) for e in events) if q is not None}
        for queue in changed:
            record = records.get(queue)
            if record is None:
                self.drop(queue)
            else:
                self.lead(queue, record)

    def _local(self, queue: Queue) -> StreamQueue | None:
        vhost = self.broker.vhosts.get(queue[0])
        return None if vhost is None else vhost.queues.get(queue[1])


def _ungated(stream: Stream) -> None:
    if not stream.gated:
        stream.ungate()
