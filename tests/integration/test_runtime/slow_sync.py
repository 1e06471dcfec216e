"""A slow (or failing) ``os.fdatasync`` of definitions.log or ``os.fsync`` of chosen paths,
a slow removal of deleted queues' files, a slow publisher-sequence scan, and a loop-lateness
ticker, for the tests that check definitions changes never sync, deletes never remove files,
and rebuilds never scan, on the event loop."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aio_pika

from sievemq.storage.layout import TOMBSTONE_PREFIX
from sievemq.storage.publishers import PublisherSequences
from sievemq.testing import running_gateway

SLOW_SYNC_S = 1.0
HOLD_S = 10.0  # a held sync goes on by itself after this, so a broken test cannot hang


def _definitions_fd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith("/definitions.log")
    except OSError:
        return False


class SlowDefinitionsSync:
    """``os.fdatasync`` that sleeps ``delay`` (or raises ``error``) for definitions.log.

    With ``hold()``, the syncs started from then on wait until ``release()`` instead: a test
    can then check what is (not) answered while a sync is under way without racing a timer,
    however slow the machine is."""

    def __init__(self, delay: float = SLOW_SYNC_S, error: OSError | None = None) -> None:
        self.delay = delay
        self.error = error
        self.threads: list[int] = []  # one entry per definitions sync, at its start
        self.ended: list[float] = []  # time.monotonic() after each definitions sync
        self.timed_out = 0  # held syncs that went on after HOLD_S without a release
        self._gate: threading.Event | None = None
        self._real: Callable[[int], None] = os.fdatasync

    def hold(self) -> None:
        self._gate = threading.Event()

    def release(self) -> None:
        if self._gate is not None:
            self._gate.set()
        self._gate = None

    def __call__(self, fd: int) -> None:
        if _definitions_fd(fd):
            self.threads.append(threading.get_ident())
            gate = self._gate
            if gate is None:
                time.sleep(self.delay)
            elif not gate.wait(HOLD_S):
                self.timed_out += 1
            if self.error is not None:
                raise self.error
            self._real(fd)
            self.ended.append(time.monotonic())
            return
        self._real(fd)


async def fill_streams(
    data: Path, stream: str, messages: list[aio_pika.Message], *others: str
) -> None:
    """Before the test's own start: an in-process gateway on ``data`` declares ``stream``
    (and the empty ``others``), publishes ``messages`` to it with confirms, and stops."""
    async with running_gateway(data) as gw:
        conn = await aio_pika.connect(gw.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            for name in (stream, *others):
                await ch.declare_queue(name, durable=True, arguments={"x-queue-type": "stream"})
            for message in messages:
                await ch.default_exchange.publish(message, stream)


async def publish_timed(
    channel: aio_pika.abc.AbstractChannel, queue: str, count: int = 5
) -> list[float]:
    """Publish ``count`` messages to ``queue`` one at a time through the default exchange
    of an aio-pika ``channel`` (with confirms: each waits for its ack); the seconds each
    took. Another connection served while something slow runs answers each at once."""
    served = []
    for i in range(count):
        started = time.monotonic()
        await channel.default_exchange.publish(aio_pika.Message(b"m%d" % i), queue)
        served.append(time.monotonic() - started)
    return served


async def _ticker(loop: asyncio.AbstractEventLoop, lateness: list[float]) -> None:
    while True:
        due = loop.time() + 0.01
        await asyncio.sleep(0.01)
        lateness.append(loop.time() - due)


def stream_dir(target: str) -> bool:
    """A stream's directory, or the directory holding stream directories: a new stream's
    files are made durable by their fsyncs."""
    return "/streams/" in target and os.path.isdir(target)


class SlowFsync:
    """``os.fsync`` that sleeps ``delay`` (or raises ``error``) for the files or directories
    ``matches`` picks by path, recording the thread each ran in."""

    def __init__(
        self,
        matches: Callable[[str], bool],
        delay: float = SLOW_SYNC_S,
        error: OSError | None = None,
    ) -> None:
        self.matches = matches
        self.delay = delay
        self.error = error
        self.threads: list[int] = []
        self._real: Callable[[int], None] = os.fsync

    def __call__(self, fd: int) -> None:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if self.matches(target):
            self.threads.append(threading.get_ident())
            time.sleep(self.delay)
            if self.error is not None:
                raise self.error
        self._real(fd)


class SlowRemoval:
    """``shutil.rmtree`` that sleeps ``SLOW_SYNC_S`` first for a deleted stream's or queue's
    tombstone under one of ``kinds`` (``streams``, ``queues``), recording the thread."""

    def __init__(self, kinds: tuple[str, ...] = ("streams", "queues")) -> None:
        self.kinds = kinds
        self.threads: list[int] = []
        self.removed: list[Path] = []
        self._real: Callable[..., Any] = shutil.rmtree

    def __call__(self, path: Any, *args: Any, **kwargs: Any) -> None:
        p = Path(path)
        if p.name.startswith(TOMBSTONE_PREFIX) and any(k in p.parts for k in self.kinds):
            self.threads.append(threading.get_ident())
            time.sleep(SLOW_SYNC_S)
            self.removed.append(p)
        self._real(path, *args, **kwargs)


class SlowScan:
    """``PublisherSequences._scan`` that sleeps ``SLOW_SYNC_S`` first (a long stream)."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self._real: Callable[..., int] = PublisherSequences._scan

    def method(self) -> Callable[[PublisherSequences, Any, int], int]:
        return lambda sequences, stream, start: self(sequences, stream, start)

    def __call__(self, sequences: PublisherSequences, stream: Any, start: int) -> int:
        if start < stream.end_offset:
            self.threads.append(threading.get_ident())
            time.sleep(SLOW_SYNC_S)
        return self._real(sequences, stream, start)
