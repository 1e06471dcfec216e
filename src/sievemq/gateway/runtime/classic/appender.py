"""Group commit into a classic/quorum queue: one writer per queue, like the stream appender.

Publishes that arrive during one event-loop tick are enqueued together (persistent messages of
a durable queue go to its log in one write), then their confirms are settled. Durability:
``always`` fdatasyncs the log before confirming; ``batch`` fdatasyncs every
``sync_interval_ms`` while the log is dirty; ``never`` leaves it to the OS. Messages refused by
``x-overflow`` reject-publish are nacked, and so is every publish to a fenced quorum queue
leader (``ClassicQueue.fenced``: ``cluster.failover``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future

from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.runtime.ports import ConfirmSink
from sievemq.storage import Durability, Message

log = logging.getLogger(__name__)


class ClassicAppender:
    """The single writer of one classic or quorum queue on the event loop."""

    __slots__ = (
        "_batch",
        "_closed",
        "_executor",
        "_expiry_handle",
        "_loop",
        "_scheduled",
        "_sinks",
        "_sync_handle",
        "_sync_interval",
        "_syncing",
        "durability",
        "queue",
    )

    def __init__(
        self,
        queue: ClassicQueue,
        loop: asyncio.AbstractEventLoop,
        durability: Durability,
        sync_interval_ms: int,
        executor: Executor | None = None,
    ) -> None:
        self.queue = queue
        self._executor = executor
        self._syncing = False
        self.durability = durability
        self._loop = loop
        self._sync_interval = sync_interval_ms / 1000.0
        self._batch: list[tuple[str, str, bytes, bytes]] = []
        self._sinks: list[tuple[ConfirmSink | None, int]] = []
        self._scheduled = False
        self._closed = False
        self._sync_handle: asyncio.TimerHandle | None = None
        self._expiry_handle: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> int:
        return len(self._batch)

    def submit(self, message: Message, sink: ConfirmSink | None, seq: int) -> None:
        if self._closed:
            if sink is not None:
                sink.settle_confirms([seq], False)
            return
        self._batch.append(
            (message.exchange, message.routing_key, message.properties, message.body)
        )
        self._sinks.append((sink, seq))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def flush(self) -> None:
        """Enqueue the buffered publishes now (the tick's callback does it otherwise)."""
        self._flush()

    def _flush(self) -> None:
        self._scheduled = False
        batch, sinks = self._batch, self._sinks
        self._batch, self._sinks = [], []
        if not batch:
            return
        queue = self.queue
        if queue.fenced:  # a leader that may have been replaced: nothing written, all nacked
            self._settle(sinks, [False] * len(batch))
            return
        try:
            results = queue.enqueue(batch)
            qlog = queue.log
            if qlog is not None and qlog.dirty:
                if self.durability is Durability.ALWAYS:
                    # fdatasync off the loop; the confirms wait for it
                    qlog.dirty = False
                    self._arm_expiry()
                    self._after_sync(lambda: self._settle(sinks, results))
                    return
                if self.durability is Durability.BATCH and self._sync_handle is None:
                    self._sync_handle = self._loop.call_later(self._sync_interval, self._sync)
        except OSError as error:
            log.error("enqueue into %r failed: %s", queue, error)
            results = [False] * len(batch)
        self._arm_expiry()
        self._settle(sinks, results)

    def _after_sync(self, done: Callable[[], None]) -> None:
        """fdatasync the log in a worker thread (inline without one), then call ``done``."""
        if self._executor is None:
            self._sync_inline()
            done()
            return
        future: Future[None] = self._executor.submit(self._sync_inline)
        future.add_done_callback(lambda _f: self._loop.call_soon_threadsafe(done))

    def _sync_inline(self) -> None:
        try:
            self.queue.sync_now()
        except OSError as error:
            log.error("sync of %r failed: %s", self.queue, error)

    def _settle(self, sinks: list[tuple[ConfirmSink | None, int]], results: list[bool]) -> None:
        settled: dict[tuple[ConfirmSink, bool], list[int]] = {}
        for (sink, seq), ok in zip(sinks, results, strict=True):
            if sink is not None:
                settled.setdefault((sink, ok), []).append(seq)
        for (sink, ok), seqs in settled.items():
            sink.settle_confirms(seqs, ok)

    def _arm_expiry(self) -> None:
        """Messages with a TTL expire (and are dead-lettered) on time, consumers or not."""
        if self._expiry_handle is not None or self._closed:
            return
        expiry = self.queue.next_expiry()
        if expiry is None:
            return
        delay = max(0.0, expiry / 1000 - time.time()) + 0.001
        self._expiry_handle = self._loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        self._expiry_handle = None
        if self.queue.deleted:
            return
        self.queue.expire()
        self._arm_expiry()

    def _sync(self) -> None:
        """The batch timer: fdatasync in a worker thread, one at a time."""
        self._sync_handle = None
        qlog = self.queue.log
        if qlog is None or not qlog.dirty or self._syncing:
            return
        qlog.dirty = False
        self._syncing = True
        self._after_sync(self._synced)

    def _synced(self) -> None:
        self._syncing = False

    def flush_now(self) -> None:
        """Shutdown: enqueue what is buffered and fdatasync."""
        self._flush()
        if self._sync_handle is not None:
            self._sync_handle.cancel()
            self._sync_handle = None
        self._sync_inline()

    def close(self) -> None:
        """The queue was deleted: pending publishes are nacked."""
        self._closed = True
        if self._expiry_handle is not None:
            self._expiry_handle.cancel()
            self._expiry_handle = None
        if self._sync_handle is not None:
            self._sync_handle.cancel()
            self._sync_handle = None
        sinks, self._sinks, self._batch = self._sinks, [], []
        for sink, seq in sinks:
            if sink is not None:
                sink.settle_confirms([seq], False)
