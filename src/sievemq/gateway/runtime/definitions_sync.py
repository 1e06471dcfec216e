"""The definitions log's fdatasync, off the event loop, shared by everyone who waits for it.

A declare, delete or bind (over AMQP or HTTP) writes its line to ``definitions.log`` on the
loop with the store's ``defer_sync`` on, so the write returns at once and the store owes an
fdatasync. ``DefinitionsSync.wait()`` gives a future that is done once every line written so
far is on disk: the fdatasync runs in a worker thread. A group commit: while one sync is in
flight, every change made meanwhile waits for the one next sync, which starts when the first
ends, so N concurrent declares cost about two fdatasyncs, not N. A failed sync fails every
future of its round (and the store owes the sync again, so the next round retries it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sievemq.amqp import errors
from sievemq.gateway.model.definitions import DefinitionStore
from sievemq.gateway.runtime import descriptors
from sievemq.storage.stream import StreamFilesError


class DefinitionsSync:
    """Group-committed fdatasync of one definitions store (see the module docstring)."""

    def __init__(self, store: DefinitionStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop
        self._inflight: asyncio.Future[None] | None = None
        self._next: asyncio.Future[None] | None = None
        self.rounds = 0  # fdatasyncs started (tests and metrics count them)
        # more a change waits for besides the fdatasync (a cluster node's etcd commit of a
        # queue it now leads): added during the change, joined into the future it waits on
        self._also: list[asyncio.Future[None]] = []

    def also_wait(self, future: asyncio.Future[None]) -> None:
        """The change being made also waits for ``future`` (its reply is held until then)."""
        self._also.append(future)

    @property
    def owed(self) -> bool:
        """True when some change written so far is not known to be on disk yet."""
        return self._store.owes_sync or self._inflight is not None

    def begin(self) -> int:
        """A change starts on the loop (a channel's method): its commits write but leave
        the fdatasync to this object. Give the result to ``end``."""
        self._store.defer_sync = True
        self._also.clear()  # added outside any change (a timer's delete): nobody waits
        return self._store.writes

    def end(self, began: int) -> asyncio.Future[None] | None:
        """The change ended: the future of the fdatasync its writes wait for (already
        started), or None when it wrote nothing, or nothing that is not on disk yet."""
        self._store.defer_sync = False
        if self._store.writes == began and not self._also:
            return None
        return self.wait()

    def wait(self) -> asyncio.Future[None] | None:
        """A future done when every definitions line written so far is on disk (its
        exception is the OSError of a failed fdatasync), and what ``also_wait`` added since
        the last call; None when all that is already so."""
        synced = self._wait_sync()
        also, self._also = self._also, []
        if not also:
            return synced
        return _all(self._loop, ([synced] if synced is not None else []) + also)

    def flush(self) -> asyncio.Future[None] | None:
        """Start the fdatasync of every line written so far, and nothing else (changes a
        cluster node applies from the others: nobody's reply waits for them, and what
        ``also_wait`` holds stays for the change it belongs to)."""
        return self._wait_sync()

    def _wait_sync(self) -> asyncio.Future[None] | None:
        if not self._store.owes_sync:
            return self._inflight  # the sync in flight covers everything written
        if self._inflight is None:
            return self._start()
        if self._next is None:
            self._next = self._loop.create_future()
        return self._next

    def _start(self) -> asyncio.Future[None] | None:
        sync = self._store.take_sync()
        if sync is None:
            return None
        self.rounds += 1
        done = self._inflight = self._loop.create_future()
        work = self._loop.run_in_executor(None, sync)
        work.add_done_callback(lambda w: self._finished(w, done))
        return done

    def _finished(self, work: asyncio.Future[None], done: asyncio.Future[None]) -> None:
        self._inflight = None
        error = asyncio.CancelledError() if work.cancelled() else work.exception()
        if error is not None:
            self._store.sync_failed()
            settle(done, error)
        else:
            settle(done, None)
        waiting, self._next = self._next, None
        if waiting is None:
            return
        following = self._start()
        if following is None:  # a compaction synced the whole log meanwhile
            settle(waiting, None)
        else:
            following.add_done_callback(lambda f: settle(waiting, f.exception()))


def settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    """Finish ``future`` with ``error`` (None: success) unless it is done already; a failure
    is marked retrieved, so a waiter that went away leaves no "never retrieved" log."""
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
        future.exception()  # retrieved here: a waiter that went away logs nothing


def _all(
    loop: asyncio.AbstractEventLoop, futures: list[asyncio.Future[None]]
) -> asyncio.Future[None]:
    """Done when every one of ``futures`` is, failed with the first failure."""
    done = loop.create_future()
    left = [len(futures)]

    def one(future: asyncio.Future[None]) -> None:
        left[0] -= 1
        error = asyncio.CancelledError() if future.cancelled() else future.exception()
        if error is not None:
            settle(done, error)
        elif left[0] == 0:
            settle(done, None)

    for future in futures:
        future.add_done_callback(one)
    return done


def when_synced(future: asyncio.Future[None], then: Callable[[BaseException | None], None]) -> None:
    """Call ``then(None)`` once ``future`` succeeded, ``then(error)`` if it failed."""
    future.add_done_callback(lambda f: then(f.exception()))


class ReplicationFailed(Exception):
    """A change's commit beyond this node failed (a cluster's etcd); the text says why."""


def sync_failure(error: BaseException) -> errors.AMQPError:
    """The connection.close of a change that could not be made durable: 506 when the
    process was out of descriptors (it recovers as they free up), else 541."""
    if descriptors.is_exhausted(error):
        return errors.ResourceError(
            f"cannot make a definitions change durable: {descriptors.exhausted_text(error)}"
        )
    return errors.InternalError(failure_text(error))


def failure_text(error: BaseException) -> str:
    """The 541 text of a change that could not be made durable (names what failed)."""
    if isinstance(error, ReplicationFailed):
        return f"cannot make a definitions change durable: {error}"
    what = (
        "creating a new stream's files"
        if isinstance(error, StreamFilesError)
        else "the fdatasync of definitions.log"
    )
    return (
        f"cannot make a definitions change durable: {what} failed ({type(error).__name__}: {error})"
    )
