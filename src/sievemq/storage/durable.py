"""Small durability helpers shared by every writer of a data directory (the stream store,
the offsets store, the gateway's definitions log, ``sievemq export``)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """fsync a directory, so the names created, renamed or removed in it are on disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_and_close(fds: list[int]) -> None:
    """fdatasync each descriptor, then close them all (``Stream.sync_handles``'s duplicates,
    in a worker thread: what the writer's thread rolls over or closes meanwhile is apart)."""
    try:
        for fd in fds:
            os.fdatasync(fd)
    finally:
        for fd in fds:
            os.close(fd)
