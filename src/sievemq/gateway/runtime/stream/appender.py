"""Group commit: one writer per stream, shared by every connection that publishes to it.

HOT PATH. Publishes that arrive during one event-loop tick are buffered per stream and written
as ONE chunk (``Stream.append``) from a ``loop.call_soon`` callback; then the publishers'
confirms are settled. Durability decides where the write runs:

- ``always``: append + fdatasync in a worker thread, one batch in flight per stream; the next
  batch accumulates meanwhile and goes as soon as the previous one is durable.
- ``batch``: append inline; every ``sync_interval_ms`` while dirty, an fdatasync runs in a
  worker thread (on duplicated descriptors) so the loop never waits for the disk.
- ``never``: append inline.

A replicated stream's leader gates its stream (``Stream.gate``, ``cluster/commit.py``): the
confirms of a written batch are then held until the stream's committed offset (what a
majority of its members holds) reaches the batch's end. An ungated stream (a single node,
a stream with one member) settles at once, as before: one attribute test per batch.

When the stream has registered SQL subscriptions, each batch is evaluated against them here,
before ``Stream.append``, and the answer travels as the chunk's opaque extra blob (storage
stays protocol-free; see ``filtering.subscriptions``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, wait

from sievemq.filtering.subscriptions import registry
from sievemq.gateway.runtime.latency import WriteLatencies
from sievemq.gateway.runtime.ports import ConfirmSink
from sievemq.storage import Durability, Message, StorageError, Stream
from sievemq.storage.durable import sync_and_close
from sievemq.storage.publishers import PublisherSequences

log = logging.getLogger(__name__)


Tokens = dict[ConfirmSink, list[int]]  # per publishing channel, its seqs in the batch


class StreamAppender:
    """The single writer of one stream on the event loop."""

    __slots__ = (
        "_after_next",
        "_buffer",
        "_closed",
        "_dirty",
        "_executor",
        "_fenced",
        "_held",
        "_in_flight",
        "_in_flight_done",
        "_in_flight_tokens",
        "_listening",
        "_loop",
        "_loop_thread",
        "_on_exhausted",
        "_refused",
        "_scheduled",
        "_sequences",
        "_sinks",
        "_subscriptions",
        "_sync_handle",
        "_sync_interval",
        "_sync_started",
        "_tokens",
        "durability",
        "latencies",
        "stream",
    )

    def __init__(
        self,
        stream: Stream,
        loop: asyncio.AbstractEventLoop,
        executor: Executor | None,
        sync_interval_ms: int | None = None,
        latencies: WriteLatencies | None = None,
        on_exhausted: Callable[[OSError], None] | None = None,
        fenced: Callable[[], bool] | None = None,
        sequences: Callable[[], PublisherSequences | None] | None = None,
    ) -> None:
        self.stream = stream
        # the stream's publisher sequences, if loaded: a batch refused unwritten takes its
        # publishing ids back (``PublisherSequences.refused``), so a resend is stored
        self._sequences = sequences
        self._refused = False  # a batch was refused since the last write
        # a replicated stream's leader that may have been replaced (``cluster.failover``):
        # while it says so, nothing is confirmed, every batch is nacked unwritten
        self._fenced = fenced
        self.latencies = latencies or WriteLatencies()
        self._sync_started = 0.0
        # told when an append failed for want of disk space or descriptors (the node raises
        # the disk alarm): the batch is nacked at once, without retrying message by message
        self._on_exhausted = on_exhausted
        self.durability = stream.config.durability
        self._loop = loop
        self._executor = executor
        interval = stream.config.sync_interval_ms if sync_interval_ms is None else sync_interval_ms
        self._sync_interval = interval / 1000.0
        self._buffer: list[Message] = []
        self._sinks: list[ConfirmSink | None] = []  # per buffered message: who hears of it
        self._tokens: Tokens = {}
        self._scheduled = False
        # the append running in a worker thread (durability always), what to do when it
        # ends, and the confirms it owes: close() and flush_now() wait for it
        self._in_flight: Future[object] | None = None
        self._in_flight_done: Callable[[Future[object]], None] | None = None
        self._in_flight_tokens: Tokens = {}
        self._dirty = False
        self._closed = False
        self._sync_handle: asyncio.TimerHandle | None = None
        self._subscriptions = registry(stream)
        # a gated stream's written batches whose confirms wait for the committed offset:
        # (the batch's end offset, its confirms), oldest first
        self._held: deque[tuple[int, Tokens]] = deque()
        # duplicates' confirms that go with the next written batch (their first copy may
        # be in it: submitted, not written yet)
        self._after_next: Tokens = {}
        self._listening = False
        self._loop_thread = threading.get_ident()

    def confirm_duplicates(self, sink: ConfirmSink, seqs: list[int]) -> None:
        """Publishes this stream already holds (dedup): confirmed at once, but on a gated
        stream only once what was submitted before them is committed (their first copy may
        still wait for the majority)."""
        if not self.stream.gated:
            sink.settle_confirms(seqs, True)
            return
        if self._buffer or self._in_flight is not None:
            self._after_next.setdefault(sink, []).extend(seqs)
            return
        self._confirm({sink: seqs})

    def _confirm(self, tokens: Tokens) -> None:
        """A batch is written (and synced as ``--fsync`` says): confirm it, or on a gated
        stream hold it until the committed offset reaches its end."""
        if self._after_next:
            tokens = _merged(tokens, self._after_next)
            self._after_next = {}
        stream = self.stream
        if not stream.gated:
            _settle(tokens, True)
            return
        end = stream.end_offset
        if end <= stream.committed_offset:
            _settle(tokens, True)
            return
        if not tokens:
            return
        self._held.append((end, tokens))
        if not self._listening:
            self._listening = True
            stream.add_listener(self._on_committed)

    def _on_committed(self, committed: int) -> None:
        """The stream's committed offset moved (in ``Stream.commit``'s thread, or in the
        appending worker's once the stream is ungated)."""
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self._on_committed, committed)
            return
        held = self._held
        ok = self._fenced is None or not self._fenced()  # a fenced leader confirms nothing
        while held and held[0][0] <= committed:
            tokens = held.popleft()[1]
            if ok:
                _settle(tokens, True)
            else:
                _nack_written(tokens)
        if not held and self._listening:
            self._listening = False
            self.stream.remove_listener(self._on_committed)

    @property
    def held(self) -> int:
        """Written batches whose confirms wait for the committed offset."""
        return len(self._held)

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
        self._sinks.append(sink)
        if sink is not None:
            seqs = self._tokens.get(sink)
            if seqs is None:
                self._tokens[sink] = [seq]
            else:
                seqs.append(seq)
        if not self._scheduled and self._in_flight is None:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def submit_many(
        self,
        messages: list[Message],
        sinks: Sequence[ConfirmSink | None],
        sink: ConfirmSink,
        seqs: list[int],
    ) -> None:
        """``submit`` for a batch: ``sinks`` per message, ``sink`` hears of ``seqs``."""
        if self._closed:
            sink.settle_confirms(seqs, False)
            return
        self._buffer.extend(messages)
        self._sinks.extend(sinks)
        owed = self._tokens.get(sink)
        if owed is None:
            self._tokens[sink] = seqs
        else:
            owed.extend(seqs)
        if not self._scheduled and self._in_flight is None:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def _take(self) -> tuple[list[Message], list[ConfirmSink | None], Tokens]:
        batch, sinks, tokens = self._buffer, self._sinks, self._tokens
        self._buffer, self._sinks, self._tokens = [], [], {}
        return batch, sinks, tokens

    def _flush(self) -> None:
        self._scheduled = False
        if not self._buffer or self._in_flight is not None or self._closed:
            return
        batch, sinks, tokens = self._take()
        if self._fenced is not None and self._fenced():
            self._refuse(batch)
            _settle(tokens, False)
            return
        if self.durability is Durability.ALWAYS and self._executor is not None:
            extra = self._extra(batch)
            self._start(
                tokens,
                lambda f: self._after_batch(f, batch, sinks, tokens),
                self.stream.append,
                batch,
                None,
                extra,
            )
            return
        started = time.perf_counter()
        try:
            self.stream.append(batch, None, self._extra(batch))
        except _APPEND_ERRORS as error:
            log.error("append to %s failed: %s", self.stream.directory, error)
            if self._exhausted(error):
                self._refuse(batch)
                _settle(tokens, False)
                return
            oks = _append_each(self.stream, batch, self._extras(batch))
            self._refuse([m for m, stored in zip(batch, oks, strict=True) if not stored])
            _settle_each(sinks, tokens, oks, self._confirm)
            ok = any(oks)
        else:
            self.latencies.append.observe(time.perf_counter() - started)
            if self._refused:
                self._write_again()
            self._confirm(tokens)
            ok = True
        if ok and self.durability is Durability.BATCH:
            self._dirty = True
            if self._sync_handle is None:
                self._sync_handle = self._loop.call_later(self._sync_interval, self._sync)

    def _refuse(self, batch: Sequence[Message]) -> None:
        """``batch`` is nacked unwritten: its publishing ids are not the stream's."""
        sequences = None if self._sequences is None else self._sequences()
        if sequences is not None and batch:
            sequences.refused(batch)
            self._refused = True

    def _write_again(self) -> None:
        """Writing again after a refusal (cold: once per refusal)."""
        self._refused = False
        sequences = None if self._sequences is None else self._sequences()
        if sequences is not None:
            sequences.written()

    def _exhausted(self, error: BaseException) -> bool:
        """Whether the append failed for want of disk or descriptors (then reported)."""
        cause = exhausted_resource(error)
        if cause is None:
            return False
        if self._on_exhausted is not None:
            self._on_exhausted(cause)
        return True

    def _extra(self, batch: Sequence[Message]) -> bytes:
        subscriptions = self._subscriptions
        return subscriptions.extra_for(batch) if subscriptions.slots else b""

    def _extras(self, batch: Sequence[Message]) -> list[bytes]:
        """The extra blob of each message written as a chunk of its own."""
        return [self._extra((message,)) for message in batch]

    # ------------------------------------------------------------------ worker thread

    def _start(
        self,
        tokens: Tokens,
        done: Callable[[Future[object]], None],
        fn: Callable[..., object],
        *args: object,
    ) -> None:
        assert self._executor is not None
        future = self._executor.submit(fn, *args)
        self._sync_started = time.perf_counter()
        self._in_flight = future
        self._in_flight_done = done
        self._in_flight_tokens = tokens
        loop = self._loop
        future.add_done_callback(lambda f: loop.call_soon_threadsafe(self._finish, f))

    def _finish(self, future: Future[object]) -> None:
        """On the loop: the worker's append ended (ignored if close() already handled it)."""
        if self._in_flight is not future:
            return
        done = self._in_flight_done
        self._in_flight = self._in_flight_done = None
        self._in_flight_tokens = {}
        assert done is not None
        done(future)
        if self._buffer and self._in_flight is None:
            self._flush()

    def _after_batch(
        self,
        future: Future[object],
        batch: list[Message],
        sinks: list[ConfirmSink | None],
        tokens: Tokens,
    ) -> None:
        error = future.exception()
        if error is None:
            # durability always: the worker appended and fdatasynced the batch (fenced
            # meanwhile: written, but another leader may not have it, so nacked)
            self.latencies.append.observe(time.perf_counter() - self._sync_started)
            if self._refused:
                self._write_again()
            if self._fenced is not None and self._fenced():
                _nack_written(tokens)
            else:
                self._confirm(tokens)
            return
        log.error("append to %s failed: %s", self.stream.directory, error)
        if len(batch) == 1 or self._exhausted(error):
            self._refuse(batch)
            _settle(tokens, False)
            return
        # one bad message must not nack the others: write them one chunk each, still in the
        # worker thread, and nack only what fails again
        self._start(
            tokens,
            lambda f: self._settle_each(batch, sinks, tokens, _oks(f, len(batch))),
            _append_each,
            self.stream,
            batch,
            self._extras(batch),
        )

    def _settle_each(
        self,
        batch: list[Message],
        sinks: list[ConfirmSink | None],
        tokens: Tokens,
        oks: list[bool],
    ) -> None:
        self._refuse([m for m, stored in zip(batch, oks, strict=True) if not stored])
        _settle_each(sinks, tokens, oks, self._confirm)

    def _wait_in_flight(self) -> None:
        """Block until the worker's append ends and handle it now (cold: delete, shutdown)."""
        while (future := self._in_flight) is not None:
            wait([future])
            self._finish(future)

    # ------------------------------------------------------------------ sync (batch)

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
        self._sync_started = time.perf_counter()
        future = self._loop.run_in_executor(self._executor, sync_and_close, fds)
        future.add_done_callback(self._after_sync)

    def _after_sync(self, future: asyncio.Future[None]) -> None:
        error = future.exception()
        if error is None:
            self.latencies.fsync.observe(time.perf_counter() - self._sync_started)
        else:
            log.error("sync of %s failed: %s", self.stream.directory, error)

    # ------------------------------------------------------------------ shutdown, delete

    def flush_now(self) -> None:
        """Shutdown, on the loop thread: wait for the append in flight (its confirms are
        settled), write what is buffered, fdatasync. The stream is closed by its owner."""
        self._wait_in_flight()
        if self._buffer and not self._closed:
            batch, sinks, tokens = self._take()
            try:
                self.stream.append(batch, None, self._extra(batch))
            except _APPEND_ERRORS as error:
                log.error("append to %s failed: %s", self.stream.directory, error)
                oks = _append_each(self.stream, batch, self._extras(batch))
                _settle_each(sinks, tokens, oks, self._confirm)
            else:
                self._confirm(tokens)
        if self._sync_handle is not None:
            self._sync_handle.cancel()
            self._sync_handle = None
        if self._dirty:
            self._dirty = False
            try:
                self.stream.sync()
            except (StorageError, OSError, ValueError) as error:
                log.error("sync of %s failed: %s", self.stream.directory, error)

    def close(self) -> None:
        """The stream is going away: stop accepting and nack every message not confirmed.

        Never waits: an append running in a worker thread (append + fdatasync under
        ``--fsync always``) is nacked now even if it will succeed, since its chunk goes with
        the stream (nothing stays stored, so nack: docs/compatibility.md "Publishing"), and its
        end is then ignored. ``Stream.delete`` leaves the files to that thread until its
        append ends."""
        self._closed = True
        if self._sync_handle is not None:
            self._sync_handle.cancel()
            self._sync_handle = None
        if self._in_flight is not None:
            tokens = self._in_flight_tokens
            self._in_flight = self._in_flight_done = None
            self._in_flight_tokens = {}
            _settle(tokens, False)
        _, _, tokens = self._take()
        _settle(tokens, False)
        while self._held:  # written, never committed: the stream goes
            _nack_written(self._held.popleft()[1])
        _settle(self._after_next, False)
        self._after_next = {}
        if self._listening:
            self._listening = False
            self.stream.remove_listener(self._on_committed)


_APPEND_ERRORS = (StorageError, OSError, ValueError)
_EXHAUSTED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE})


def exhausted_resource(error: BaseException | None) -> OSError | None:
    """The OSError (ENOSPC, EDQUOT, EMFILE, ENFILE) behind ``error``, if any."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in _EXHAUSTED:
            return error
        error = error.__cause__
    return None


def _append_each(stream: Stream, batch: Sequence[Message], extras: Sequence[bytes]) -> list[bool]:
    """Write each message as a chunk of its own; which ones were stored (a failed append
    commits nothing, so retrying the others after a batch failure never duplicates)."""
    oks: list[bool] = []
    for message, extra in zip(batch, extras, strict=True):
        try:
            stream.append((message,), None, extra)
        except _APPEND_ERRORS as error:
            log.error("append to %s failed for one message: %s", stream.directory, error)
            oks.append(False)
        else:
            oks.append(True)
    return oks


def _oks(future: Future[object], n: int) -> list[bool]:
    if future.exception() is not None:
        return [False] * n
    result = future.result()
    assert isinstance(result, list)
    return result


def _merged(tokens: Tokens, more: Tokens) -> Tokens:
    merged = {sink: list(seqs) for sink, seqs in tokens.items()}
    for sink, seqs in more.items():
        merged.setdefault(sink, []).extend(seqs)
    return merged


def _settle(tokens: Tokens, ok: bool) -> None:
    for sink, seqs in tokens.items():
        sink.settle_confirms(seqs, ok)


def _nack_written(tokens: Tokens) -> None:
    """Nack what was written but cannot be confirmed (a fenced leader; the stream goes):
    unlike a refused publish it is in the log, so a deduplicating publisher must still
    take its resend for a duplicate (``nack_written``, where the sink has it)."""
    for sink, seqs in tokens.items():
        nack = getattr(sink, "nack_written", None)
        if nack is not None:
            nack(seqs)
        else:
            sink.settle_confirms(seqs, False)


def _settle_each(
    sinks: Sequence[ConfirmSink | None],
    tokens: Tokens,
    oks: Sequence[bool],
    confirm: Callable[[Tokens], None],
) -> None:
    """Settle a batch message by message: ``sinks[i]`` owes the next seq of its token list;
    ``confirm`` takes those stored."""
    pending = {sink: iter(seqs) for sink, seqs in tokens.items()}
    good: Tokens = {}
    bad: Tokens = {}
    for sink, ok in zip(sinks, oks, strict=True):
        if sink is not None:
            (good if ok else bad).setdefault(sink, []).append(next(pending[sink]))
    confirm(good)
    _settle(bad, False)
