"""One delivery turn at a time on the event loop, woken by a stream's commits.

The base of the AMQP stream consumer (``session.stream.consumer.StreamConsumer``) and the
stream-protocol subscription (``streamproto_session.subscription.Subscription``): both read their
own ``StreamReader`` in turns (``_run``) and must be woken when the stream commits new
records. The storage calls commit listeners in the appending thread (a worker under
``fsync=always``), so a wake from another thread goes through ``call_soon_threadsafe``.
At most one turn is scheduled at a time; a stopped one (``active`` false) is never run.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from sievemq.storage import Stream


class CommitWaker:
    """Subclasses set ``_stream``, call ``_init_waker`` in ``__init__`` and define
    ``_run``; ``listen``/``unlisten`` follow the stream's commits."""

    __slots__ = ("_loop", "_scheduled", "_stream", "_thread", "active")

    _stream: Stream

    def _init_waker(self, stream: Stream) -> None:
        self._stream = stream
        self.active = True
        self._scheduled = False
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    def listen(self, tail: bool = False) -> None:
        """Be woken by commits (with ``tail``: by every append, committed or not)."""
        self._stream.add_listener(self._on_commit, tail)

    def unlisten(self) -> None:
        with contextlib.suppress(ValueError, KeyError):
            self._stream.remove_listener(self._on_commit)

    def _on_commit(self, end_offset: int) -> None:
        if threading.get_ident() == self._thread:
            self.wake()
        else:
            self._loop.call_soon_threadsafe(self.wake)

    def wake(self) -> None:
        """Schedule a turn unless one is pending (or this one is stopped)."""
        if self._scheduled or not self.active:
            return
        self._scheduled = True
        self._loop.call_soon(self._run)

    def _run(self) -> None:
        """One turn; it must start with ``self._scheduled = False``."""
        raise NotImplementedError
