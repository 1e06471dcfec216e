"""Named consumers (``x-stream-consumer-name``): server-side offsets that advance contiguously.

The stored value is the last offset the consumer is done with; a named consumer without
``x-stream-offset`` resumes at stored + 1 (``next`` the first time). The commit never passes
a delivery that is not settled yet (LavinMQ #1171 committed the highest ack, losing the gap):
with deliveries 5, 6, 7 and acks for 7 then 5 the commit is 5 until 6 is settled. Nack and
reject without requeue settle too (streams redeliver nothing); nack or reject with
requeue=true and basic.recover leave the offset unsettled, so a consumer that resumes by
name gets the message again (at-least-once). Offsets a filter skipped between deliveries
never hold the commit back: it goes up to the offset before the first unsettled delivery, or
up to the reader position when nothing is unsettled.

One name, one writer: at most one consumer per (stream, name) is active. A new consume with
a name already active on the stream takes over (newest wins): the old consumer's tracker
writes its commit one last time, is retired (it never writes again, so a late ack or the old
connection closing cannot move the commit backwards) and the old consumer is cancelled.

Writes are batched: a settle marks the tracker dirty and one ``OffsetStore.set`` per loop tick
writes the result (the store fsyncs under durability ``always``; under ``batch`` the write
reaches the OS, which survives a SIGKILL of the server).

HOT PATH: ``delivered`` and ``settled`` run per message; both are dict operations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from sievemq.storage import OffsetStore, StorageError

log = logging.getLogger(__name__)


def resume_offset(store: OffsetStore, name: str) -> int | None:
    """Where a named consumer without ``x-stream-offset`` starts: stored + 1, or None (next)."""
    stored = store.get(name)
    return None if stored is None else stored + 1


class OffsetTracker:
    """Delivered-but-unsettled offsets of one named consumer, and its committed offset."""

    __slots__ = (
        "_loop",
        "_outstanding",
        "_position",
        "_scheduled",
        "_tags",
        "name",
        "retired",
        "store",
    )

    def __init__(
        self,
        name: str,
        store: OffsetStore,
        position: Callable[[], int],
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self.name = name
        self.store = store
        self._position = position  # the reader's next offset: everything below was looked at
        self._loop = loop
        self._outstanding: dict[int, bool] = {}  # offset -> settled, in delivery order
        self._tags: dict[int, int] = {}  # delivery tag -> offset
        self._scheduled = False
        self.retired = False  # taken over by a newer consumer of the same name

    def delivered(self, tag: int, offset: int) -> None:
        self._tags[tag] = offset
        self._outstanding[offset] = False

    def settled(self, tag: int, done: bool = True) -> None:
        """The client settled a delivery; ``done`` False (requeue) keeps the commit before it."""
        offset = self._tags.pop(tag, None)
        if offset is None or not done:
            return
        outstanding = self._outstanding
        if offset in outstanding:
            outstanding[offset] = True
            if next(iter(outstanding)) == offset:  # only the oldest can move the commit
                while outstanding and outstanding[next(iter(outstanding))]:
                    del outstanding[next(iter(outstanding))]
                self.schedule()

    def moved(self) -> None:
        """The reader advanced (e.g. past skipped chunks): the commit may follow it."""
        if not self._outstanding:
            self.schedule()

    def target(self) -> int | None:
        """The offset to commit now (last offset done with), or None when nothing is done."""
        outstanding = self._outstanding
        done = (next(iter(outstanding)) if outstanding else self._position()) - 1
        return done if done >= 0 else None

    def schedule(self) -> None:
        if self._scheduled:
            return
        if self._loop is None:
            self.flush()
            return
        self._scheduled = True
        self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write the commit (OffsetStore skips an unchanged value); one per loop tick at most.

        A consumer started below its commit (explicit ``x-stream-offset``) moves it back.
        """
        self._scheduled = False
        if self.retired:
            return
        done = self.target()
        if done is None:
            return
        try:
            self.store.set(self.name, done)
        except (OSError, ValueError, StorageError) as error:
            log.error("cannot store offset of consumer %r: %s", self.name, error)

    def retire(self) -> None:
        """Write the commit one last time, then never again (a newer consumer owns the name)."""
        if not self.retired:
            self.flush()
            self.retired = True


class Tracked(Protocol):
    """A consumer that may commit offsets under a name."""

    @property
    def tracker(self) -> OffsetTracker | None: ...


T = TypeVar("T", bound=Tracked)


def holders(consumers: Iterable[T], name: str) -> list[T]:
    """The active consumers of a stream that commit under ``name`` (at most one, normally)."""
    return [
        c
        for c in consumers
        if c.tracker is not None and c.tracker.name == name and not c.tracker.retired
    ]
