"""A bounded cache of open file descriptors: the count of streams is limited by disk, not fds.

Every segment and index file a writer or reader uses is a ``CachedFile``: a path and open
flags whose descriptor is opened on first use and may be closed by the cache at any time it
is not in use, least recently used first, when more than ``capacity`` are open. ``acquire``
returns an open descriptor (reopening it transparently: a writer's file is reopened at its
end) and pins it until ``release``; pinned files are never closed, so a descriptor is never
closed under a thread that is writing or reading it. Thread-safe: writers may append in
worker threads (durability ``always``) while readers read on the event loop.

When the process runs out of descriptors (EMFILE/ENFILE) while opening, every unpinned file
is closed and the open is tried once more before the error goes up.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TypeVar

DEFAULT_CAPACITY: Final = 2048
_EXHAUSTED: Final = (errno.EMFILE, errno.ENFILE)
T = TypeVar("T")


class FileCache:
    """Process-wide LRU of open ``CachedFile`` descriptors."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("the file cache needs a capacity of at least 1")
        self.capacity = capacity
        self.lock = threading.Lock()
        self.open_files: OrderedDict[CachedFile, None] = OrderedDict()
        self.evictions = 0

    def file(self, path: Path, flags: int, at_end: bool = False) -> CachedFile:
        """A handle on ``path`` (not opened yet); ``at_end`` seeks to the end on each open."""
        return CachedFile(self, path, flags, at_end)

    def set_capacity(self, capacity: int) -> None:
        with self.lock:
            self.capacity = max(1, capacity)
            self._evict(self.capacity)

    def relieve(self) -> None:
        """Close every descriptor not in use (the process ran out of them elsewhere)."""
        with self.lock:
            self._evict(0)

    def open_count(self) -> int:
        return len(self.open_files)

    def _evict(self, keep: int) -> None:
        """Close least recently used unpinned files until at most ``keep`` are open."""
        if len(self.open_files) <= keep:
            return
        for handle in list(self.open_files):
            if len(self.open_files) <= keep:
                return
            if handle.pins == 0:
                handle.close_locked()
                self.evictions += 1


class CachedFile:
    """One file whose descriptor the cache opens and closes; see the module docstring."""

    __slots__ = ("at_end", "cache", "fd", "flags", "path", "pins")

    def __init__(self, cache: FileCache, path: Path, flags: int, at_end: bool) -> None:
        self.cache = cache
        self.path = path
        self.flags = flags
        self.at_end = at_end
        self.fd = -1
        self.pins = 0

    def _open(self) -> int:
        try:
            fd = os.open(self.path, self.flags, 0o644)
        except OSError as exc:
            if exc.errno not in _EXHAUSTED:
                raise
            self.cache._evict(0)  # out of descriptors: give back every one not in use
            fd = os.open(self.path, self.flags, 0o644)
        if self.at_end:
            os.lseek(fd, 0, os.SEEK_END)
        return fd

    def acquire(self) -> int:
        """An open descriptor, pinned until ``release`` (raises OSError if it cannot open)."""
        cache = self.cache
        with cache.lock:
            self.pins += 1
            if self.fd < 0:
                try:
                    self.fd = self._open()
                except BaseException:
                    self.pins -= 1
                    raise
                cache.open_files[self] = None
                cache._evict(cache.capacity)
            else:
                cache.open_files.move_to_end(self)
            return self.fd

    def release(self) -> None:
        with self.cache.lock:
            self.pins -= 1

    @contextlib.contextmanager
    def pinned(self) -> Iterator[int]:
        """``acquire`` .. ``release`` around a block that uses the descriptor."""
        fd = self.acquire()
        try:
            yield fd
        finally:
            self.release()

    def dup(self) -> int:
        """A duplicate descriptor the caller owns (for an fsync in another thread)."""
        fd = self.acquire()
        try:
            return os.dup(fd)
        finally:
            self.release()

    def close_locked(self) -> None:
        if self.fd >= 0:
            self.cache.open_files.pop(self, None)
            fd, self.fd = self.fd, -1
            os.close(fd)

    def close(self) -> None:
        """Close now (it would reopen on the next ``acquire``)."""
        with self.cache.lock:
            self.close_locked()


# the process's cache: every Stream and StreamReader uses it unless given another
shared: Final = FileCache()


def retrying(call: Callable[[], T]) -> T:
    """``call()``; when the process is out of descriptors, the shared cache gives back
    every idle one and ``call`` runs once more (a descriptor opened outside the cache)."""
    try:
        return call()
    except OSError as exc:
        if exc.errno not in _EXHAUSTED:
            raise
    shared.relieve()
    return call()


__all__ = ["DEFAULT_CAPACITY", "CachedFile", "FileCache", "retrying", "shared"]
