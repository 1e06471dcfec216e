"""A stream queue: the broker-side handle on one storage stream.

The session layer owns consumers and publishers; it puts its consumers in ``consumers`` (seen
here only as ``ConsumerInfo``) and registers delete listeners so that a queue.delete (from any
connection or the admin API) can cancel consumers and settle pending confirms before the files
go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from sievemq.gateway.model.stream import dedup
from sievemq.gateway.model.stream.arguments import StreamArguments
from sievemq.storage import (
    FilterSpec,
    FilterStats,
    StorageError,
    Stream,
    StreamStats,
    StreamSurvey,
)
from sievemq.storage.publishers import PublisherSequences

log = logging.getLogger(__name__)

DeleteListener = Callable[["StreamQueue"], None]
# a copy's publisher sequences read at most this many new records on the event loop (more
# are read in a worker thread)
CATCH_UP_HERE = 4096


class LeaderOfCopy(Protocol):
    """What a cluster node's copy of another node's stream reaches its leader by (the
    follower, ``cluster/replication.py``)."""

    def store_offset(self, reference: str, offset: int) -> bool:
        """Send a named consumer's offset to the leader, which stores it and ships it back
        to every copy; False when the leader is not reached now (nothing is stored)."""
        ...


class ConsumerInfo(Protocol):
    """A live consumer of a stream queue, as the queue, the node and the admin views see it
    (the session's ``StreamConsumer``)."""

    @property
    def tag(self) -> str: ...
    @property
    def connection_id(self) -> int: ...
    @property
    def channel_id(self) -> int: ...
    @property
    def prefetch(self) -> int: ...
    @property
    def credit(self) -> int: ...
    @property
    def spec(self) -> FilterSpec | None:
        """Its ``x-stream-filter`` values, if any."""
        ...

    def filter_stats(self) -> FilterStats:
        """Its filter and delivery counters since it started."""
        ...

    @property
    def consumer_name(self) -> str | None:
        """Its ``x-stream-consumer-name``, if it is a named consumer."""
        ...

    @property
    def sql_text(self) -> str | None:
        """Its ``x-stream-filter-sql`` expression, if any."""
        ...

    @property
    def position(self) -> int:
        """The next offset it will read (its lag is the stream's end minus this)."""
        ...

    def cancel_by_server(self) -> None:
        """Stop it and tell its client (basic.cancel, when the client asked for those)."""
        ...


class _Unopened:
    """A stream restored at start and not opened yet: how to open it, its read-only survey
    (made on first need and kept: nothing changes its files until it opens), and what its
    policy does to it once it opens (with the filter size it will have meanwhile)."""

    __slots__ = ("filter_size_bytes", "hooks", "on_open", "opener", "summary", "survey")

    def __init__(
        self, opener: Callable[[], Stream], survey: Callable[[], StreamSurvey | None] | None
    ) -> None:
        self.opener = opener
        self.survey = survey
        self.summary: StreamSurvey | None = None
        self.on_open: Callable[[Stream], None] | None = None
        self.hooks: list[Callable[[Stream], None]] = []  # (``on_first_open``)
        self.filter_size_bytes: int | None = None

    def surveyed(self) -> StreamSurvey | None:
        """The survey (made once), or None without one or when it gave up."""
        if self.summary is None and self.survey is not None:
            self.summary = self.survey()
        return self.summary


def _deleted_opener(name: str) -> Callable[[], Stream]:
    def refuse() -> Stream:
        raise StorageError(f"stream {name!r} was deleted")

    return refuse


class StreamQueue:
    """A declared stream queue of a vhost.

    ``stream`` is the storage stream itself, or (for a queue restored at start) a call that
    opens it: then its files are recovered and opened on first use, so a node with 50,000
    idle streams starts without touching them. ``survey`` (with an opener) reads such a
    stream's statistics without opening it, for listings and scrapes (``stats``)."""

    def __init__(
        self,
        name: str,
        vhost: str,
        arguments: StreamArguments,
        stream: Stream | Callable[[], Stream],
        survey: Callable[[], StreamSurvey | None] | None = None,
        restored: bool = False,
    ) -> None:
        self.name = name
        # restored at start (its files are on disk and nothing else touches them until
        # it opens), not declared now (a worker thread may be creating its files)
        self.restored = restored
        self.vhost = vhost
        self.arguments = arguments  # as declared (policies act on ``stream.config``)
        self._stream: Stream | None = None
        self._unopened: _Unopened | None = None  # exactly one of the two is set
        if isinstance(stream, Stream):
            self._stream = stream
        else:
            self._unopened = _Unopened(stream, survey)
        self.policy: str | None = None  # the names of the policies that apply, if any
        self.operator_policy: str | None = None
        self.effective_policy: dict[str, Any] = {}
        self.consumers: set[ConsumerInfo] = set()
        self.filter_stats = FilterStats()
        self.acked = 0  # deliveries AMQP consumers acknowledged with basic.ack (RabbitMQ's ack)
        self.deleted = False
        # a replicated stream whose leadership this node may have lost (its etcd lease
        # lapsed or is late: ``cluster.failover``): publishes are nacked, none confirmed
        self.fenced = False
        self._delete_listeners: list[DeleteListener] = []
        self._sequences: PublisherSequences | None = None
        # a cluster node's copy of a stream another node leads (appended by its follower,
        # never published to here), or None: the node's own stream
        self.leader_of_copy: LeaderOfCopy | None = None

    @property
    def stream(self) -> Stream:
        """The storage stream (recovered and opened now if this is its first use)."""
        stream = self._stream
        if stream is None:
            unopened = self._unopened
            assert unopened is not None
            stream = self._stream = unopened.opener()
            self._unopened = None
            if unopened.on_open is not None:
                unopened.on_open(stream)
            for hook in unopened.hooks:
                hook(stream)
        return stream

    def on_first_open(self, hook: Callable[[Stream], None]) -> None:
        """Run ``hook`` on the storage stream when it opens (now if it is open): the
        cluster gates a replicated stream without opening an idle one."""
        unopened = self._unopened
        if unopened is None:
            hook(self.stream)
        else:
            unopened.hooks.append(hook)

    def when_open(self, change: Callable[[Stream], None], filter_size_bytes: int) -> None:
        """Run ``change`` on the storage stream now if it is open, else when it is first
        opened (the latest change wins), reporting ``filter_size_bytes`` (the one ``change``
        sets) meanwhile: a policy reaches an idle stream without opening it."""
        unopened = self._unopened
        if unopened is None:
            change(self.stream)
        else:
            unopened.on_open = change
            unopened.filter_size_bytes = filter_size_bytes

    def discard_unopened(self) -> bool:
        """Being deleted: a stream restored at start and never opened stays unopened for
        good (True), so its files can go without the recovery an open would run on the
        event loop; False when it must be opened (or is) to be deleted."""
        unopened = self._unopened
        if unopened is None or not self.restored:
            return False
        unopened.opener = _deleted_opener(self.name)
        return True

    @property
    def opened_stream(self) -> Stream | None:
        """The storage stream if something opened it (what a shutdown must close)."""
        return self._stream

    def __repr__(self) -> str:
        return f"StreamQueue({self.name!r}, vhost={self.vhost!r})"

    def publisher_sequences(self) -> PublisherSequences:
        """The last publishing id per publisher reference (stream-protocol publishers and
        deduplicated AMQP publishes alike), rebuilt from the data on first use."""
        if self._sequences is None:
            self._sequences = PublisherSequences(self.stream, dedup.stored_tag)
        return self._sequences

    def sequences_builder(self) -> Callable[[], PublisherSequences]:
        """The rebuild of ``publisher_sequences`` (snapshot + scan of the stream after it),
        as a call to run in a worker thread; give its result to ``adopt_sequences`` on the
        loop. Opens the stream now (on the caller's thread) if it is not open yet. A copy's
        loaded sequences are brought up to its end instead (its follower appends without
        them: the tags are in the data it copies)."""
        stream = self.stream
        loaded = self._sequences
        if loaded is not None:
            return lambda: _caught_up(loaded, stream)
        return lambda: PublisherSequences(stream, dedup.stored_tag)

    def adopt_sequences(self, sequences: PublisherSequences) -> PublisherSequences:
        """Take sequences built by ``sequences_builder`` (reading what was appended since),
        unless others were loaded meanwhile; returns the ones in use."""
        if self._sequences is None or self._sequences is sequences:
            sequences.catch_up(self.stream)
            self._sequences = sequences
        return self._sequences

    def current_sequences(self) -> PublisherSequences | None:
        """The loaded sequences once they cover the whole stream, else None (load them
        with ``sequences_builder``, in a worker thread). A node's own stream's are kept
        current by its publishes; a copy's are brought up to its end by reading what its
        follower appended: here when that is a few records, else None."""
        loaded = self._sequences
        if loaded is None or self.leader_of_copy is None:
            return loaded
        behind = self.stream.end_offset - loaded.scanned
        if behind > CATCH_UP_HERE:
            return None
        if behind > 0:
            loaded.catch_up(self.stream)
        return loaded

    @property
    def loaded_sequences(self) -> PublisherSequences | None:
        """The sequences if something loaded them (what a shutdown snapshot saves)."""
        return self._sequences

    def admit(self, reference: str, publishing_id: int) -> bool:
        """False for a duplicate (an id at or below the reference's last); else record it."""
        sequences = self.publisher_sequences()
        last = sequences.get(reference)
        if last is not None and publishing_id <= last:
            return False
        sequences.update(reference, publishing_id)
        return True

    def stats(self) -> StreamStats:
        """The stream's statistics. An idle stream not opened yet is surveyed on disk, read
        only, once (nothing changes it until it opens): a listing opens no stream. Only
        when recovery would have to repair something first does this open it."""
        summary = self._surveyed()
        return self.stream.stats() if summary is None else summary.stats

    def consumer_offsets(self) -> dict[str, int]:
        """Committed offsets of its named consumers (an idle stream's read, not opened)."""
        summary = self._surveyed()
        return self.stream.offsets.items() if summary is None else dict(summary.offsets)

    def _surveyed(self) -> StreamSurvey | None:
        """The survey of a stream not opened yet (made once), else None."""
        unopened = self._unopened
        return None if unopened is None else unopened.surveyed()

    @property
    def end_offset(self) -> int:
        """The offset the next message gets (an idle stream's from ``stats``)."""
        summary = self._surveyed()
        if summary is None:
            return self.stream.end_offset
        return summary.stats.first_offset + summary.stats.messages

    @property
    def filter_size_bytes(self) -> int:
        """The Bloom filter size of its chunks (an idle stream's as it will open)."""
        unopened = self._unopened
        if unopened is None:
            return self.stream.config.filter_size_bytes
        if unopened.filter_size_bytes is not None:
            return unopened.filter_size_bytes
        return self.arguments.filter_size_bytes

    @property
    def message_count(self) -> int:
        """Messages retained: end offset minus first offset."""
        summary = self._surveyed()
        if summary is not None:
            return summary.stats.messages
        return max(0, self.stream.end_offset - self.stream.first_offset)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def add_delete_listener(self, listener: DeleteListener) -> None:
        self._delete_listeners.append(listener)

    def remove_delete_listener(self, listener: DeleteListener) -> None:
        if listener in self._delete_listeners:
            self._delete_listeners.remove(listener)

    def message_stats(self) -> dict[str, int]:
        """RabbitMQ's message_stats of a stream: appended (its end offset, so it survives a
        restart), delivered to consumers (streams have no basic.get) and acknowledged."""
        delivered = self.filter_stats.messages_delivered
        return {
            "publish": self.end_offset,
            "deliver": delivered,
            "deliver_get": delivered,
            "ack": self.acked,
        }

    def read_stats(self) -> dict[str, int]:
        """What its readers did (a replica's copy: it takes no publishes of its own)."""
        delivered = self.filter_stats.messages_delivered
        return {"deliver": delivered, "deliver_get": delivered, "ack": self.acked}

    def notify_deleted(self) -> None:
        """Mark deleted and call every delete listener once; a failing listener is skipped
        so the others (and the file removal) still happen."""
        self.deleted = True
        listeners, self._delete_listeners = self._delete_listeners, []
        for listener in listeners:
            try:
                listener(self)
            except Exception:  # a broken consumer must not keep the stream alive
                log.exception("delete listener of %r failed", self)


def _caught_up(sequences: PublisherSequences, stream: Stream) -> PublisherSequences:
    sequences.catch_up(stream)
    return sequences
