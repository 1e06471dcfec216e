"""Group commit: one writer per stream, shared by every connection that publishes to it.

HOT PATH. Publishes that arrive during one event-loop tick are buffered per stream and written
as ONE chunk (``Stream.append``) from a ``loop.call_soon`` callback; then the publishers'
confirms are settled. Durability decides where the write runs:

- ``always``: append + fdatasync in a worker thread, one batch in flight per stream; the next
  batch accumulates meanwhile and goes as soon as the previous one is durable.
- ``batch``: append inline; every ``sync_interval_ms`` while dirty, an fdatasync runs in a
  worker thread (on duplicated descriptors) so the loop never waits for the disk.
- ``never``: append inline.

When the stream has registered SQL subscriptions, each batch is evaluated against them here,
before ``Stream.append``, and the answer travels as the chunk's opaque extra blob (storage
stays protocol-free; see ``gateway.subscriptions``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Protocol

from sievemq.gateway.subscriptions import registry
from sievemq.storage import Durability, Message, StorageError, Stream

log = logging.getLogger(__name__)


class ConfirmSink(Protocol):
    """A publishing channel: told per append batch which of its messages were stored."""

    def settle_confirms(self, seqs: list[int], ok: bool) -> None: ...


Tokens = dict[ConfirmSink, list[int]]  # per publishing channel, its seqs in the batch


class StreamAppender:
    """The single writer of one stream on the event loop."""

    __slots__ = (
        "_buffer",
        "_closed",
        "_dirty",
        "_executor",
        "_in_flight",
        "_loop",
        "_scheduled",
        "_subscriptions",
        "_sync_handle",
        "_sync_interval",
        "_tokens",
        "durability",
        "stream",
    )

    def __init__(
        self,
        stream: Stream,
        loop: asyncio.AbstractEventLoop,
        executor: Executor | None,
        sync_interval_ms: int | None = None,
    ) -> None:
        self.stream = stream
        self.durability = stream.config.durability
        self._loop = loop
        self._executor = executor
        interval = stream.config.sync_interval_ms if sync_interval_ms is None else sync_interval_ms
        self._sync_interval = interval / 1000.0
        self._buffer: list[Message] = []
        self._tokens: Tokens = {}
        self._scheduled = False
        self._in_flight = False
        self._dirty = False
        self._closed = False
        self._sync_handle: asyncio.TimerHandle | None = None
        self._subscriptions = registry(stream)

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def submit(self, message: Message, sink: ConfirmSink | None, seq: int) -> None:
        """Queue one message for the next chunk; its sink hears of ``seq`` after the write."""
        if self._closed:
            if sink is not None:
                sink.settle_confirms([seq], False)
            return
        self._buffer.append(message)
        if sink is not None:
            seqs = self._tokens.get(sink)
            if seqs is None:
                self._tokens[sink] = [seq]
            else:
                seqs.append(seq)
        if not self._scheduled and not self._in_flight:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def _take(self) -> tuple[list[Message], Tokens]:
        batch, tokens = self._buffer, self._tokens
        self._buffer, self._tokens = [], {}
        return batch, tokens

    def _flush(self) -> None:
        self._scheduled = False
        if not self._buffer or self._in_flight:
            return
        batch, tokens = self._take()
        if self.durability is Durability.ALWAYS and self._executor is not None:
            self._in_flight = True
            extra = self._extra(batch)
            future = self._loop.run_in_executor(
                self._executor, self.stream.append, batch, None, extra
            )
            future.add_done_callback(lambda f: self._after_thread(f, tokens))
            return
        ok = self._append(batch)
        _settle(tokens, ok)
        if ok and self.durability is Durability.BATCH:
            self._dirty = True
            if self._sync_handle is None:
                self._sync_handle = self._loop.call_later(self._sync_interval, self._sync)

    def _extra(self, batch: Sequence[Message]) -> bytes:
        subscriptions = self._subscriptions
        return subscriptions.extra_for(batch) if subscriptions.slots else b""

    def _append(self, batch: Sequence[Message]) -> bool:
        try:
            self.stream.append(batch, None, self._extra(batch))
        except (StorageError, OSError, ValueError) as error:
            log.error("append to %s failed: %s", self.stream.directory, error)
            return False
        return True

    def _after_thread(self, future: asyncio.Future[int], tokens: Tokens) -> None:
        self._in_flight = False
        error = future.exception()
        if error is not None:
            log.error("append to %s failed: %s", self.stream.directory, error)
        _settle(tokens, error is None)
        if self._buffer:
            self._flush()

    def _sync(self) -> None:
        self._sync_handle = None
        if not self._dirty or self._closed:
            return
        self._dirty = False
        try:
            if self._executor is None:
                self.stream.sync()
                return
            # fdatasync can take milliseconds: off the loop, or every publish and delivery
            # waiting behind it shows up in the tail latency
            fds = self.stream.sync_handles()
        except (StorageError, OSError, ValueError) as error:
            log.error("sync of %s failed: %s", self.stream.directory, error)
            return
        future = self._loop.run_in_executor(self._executor, _sync_fds, fds)
        future.add_done_callback(self._after_sync)

    def _after_sync(self, future: asyncio.Future[None]) -> None:
        error = future.exception()
        if error is not None:
            log.error("sync of %s failed: %s", self.stream.directory, error)

    def flush_now(self) -> None:
        """Write what is buffered and fsync (shutdown): synchronous, on the loop thread."""
        if self._buffer and not self._in_flight:
            batch, tokens = self._take()
            _settle(tokens, self._append(batch))
        if self._sync_handle is not None:
            self._sync_handle.cancel()
            self._sync_handle = None
        self._dirty = False

    def close(self) -> None:
        """Stop accepting: what is buffered is nacked (the stream is going away)."""
        self._closed = True
        if self._sync_handle is not None:
            self._sync_handle.cancel()
            self._sync_handle = None
        _, tokens = self._take()
        _settle(tokens, False)


def _sync_fds(fds: list[int]) -> None:
    """fdatasync and close descriptors (in a worker thread)."""
    try:
        for fd in fds:
            os.fdatasync(fd)
    finally:
        for fd in fds:
            os.close(fd)


def _settle(tokens: Tokens, ok: bool) -> None:
    for sink, seqs in tokens.items():
        sink.settle_confirms(seqs, ok)


AppenderFactory = Callable[[Stream], StreamAppender]
