"""A stream's files as a test compares them: a leader's and a replica's copies are equal when
their segment files are, byte for byte (replication stores chunks as they arrived)."""

from __future__ import annotations

from pathlib import Path

from sievemq.storage.segment import list_segments, segment_name

__all__ = ["segment_files"]


def segment_files(directory: Path) -> dict[str, bytes]:
    """A stream directory's segment files by name, with their bytes ({} without one)."""
    if not directory.is_dir():
        return {}
    return {
        segment_name(first): (directory / segment_name(first)).read_bytes()
        for first in list_segments(directory)
    }
