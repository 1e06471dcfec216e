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
