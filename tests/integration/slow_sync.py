"""A slow (or failing) ``os.fdatasync`` of definitions.log, and a loop-lateness ticker, for
the tests that check definitions changes never sync on the event loop."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

SLOW_SYNC_S = 1.0


def _definitions_fd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith("/definitions.log")
    except OSError:
        return False


class SlowDefinitionsSync:
    """``os.fdatasync`` that sleeps ``delay`` (or raises ``error``) for definitions.log."""

    def __init__(self, delay: float = SLOW_SYNC_S, error: OSError | None = None) -> None:
        self.delay = delay
        self.error = error
        self.threads: list[int] = []
        self.ended: list[float] = []  # time.monotonic() after each definitions sync
        self._real: Callable[[int], None] = os.fdatasync

    def __call__(self, fd: int) -> None:
        if _definitions_fd(fd):
            self.threads.append(threading.get_ident())
            time.sleep(self.delay)
            if self.error is not None:
                raise self.error
            self._real(fd)
            self.ended.append(time.monotonic())
            return
        self._real(fd)


async def _ticker(loop: asyncio.AbstractEventLoop, lateness: list[float]) -> None:
    while True:
        due = loop.time() + 0.01
        await asyncio.sleep(0.01)
        lateness.append(loop.time() - due)


class SlowStreamDirSync:
    """``os.fsync`` that sleeps ``delay`` (or raises ``error``) for the directory of a
    stream (or the directory holding stream directories): a new stream's files are made
    durable by these fsyncs."""

    def __init__(self, delay: float = SLOW_SYNC_S, error: OSError | None = None) -> None:
        self.delay = delay
        self.error = error
        self.threads: list[int] = []
        self._real: Callable[[int], None] = os.fsync

    def __call__(self, fd: int) -> None:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if "/streams/" in target and os.path.isdir(target):
            self.threads.append(threading.get_ident())
            time.sleep(self.delay)
            if self.error is not None:
                raise self.error
        self._real(fd)
