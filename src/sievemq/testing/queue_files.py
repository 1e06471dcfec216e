"""A quorum queue's log as a test reads it: a leader's and a replica's copies are equal when
their live records are (same ids, same bytes: a replica stores the records the leader wrote).

Read through ``storage.queue_log.Snapshot``, which only reads: safe while the node runs.
"""

from __future__ import annotations

from pathlib import Path

from sievemq.storage.layout import queue_directory
from sievemq.storage.queue_log import Snapshot, decode_parts, decode_record

__all__ = ["live_bodies", "live_records"]


def live_records(data_dir: Path, vhost: str, name: str) -> dict[int, bytes] | None:
    """The queue's live (unsettled) records in the log under ``data_dir``: id -> the record
    as encoded; None when the node holds no log of the queue."""
    directory = queue_directory(data_dir, vhost, name)
    if not directory.exists():
        return None
    snapshot = Snapshot(directory, 0, 1 << 62)
    snapshot.open()
    live: dict[int, bytes] = {}
    for first in snapshot.firsts:
        for record in snapshot.segment(first)[1]:
            parts = decode_parts(record)
            if parts is None:  # a snapshot hands out whole records only
                raise ValueError(f"an unreadable record in {directory}")
            live[parts[0]] = record
    return live


def live_bodies(data_dir: Path, vhost: str, name: str) -> dict[int, bytes]:
    """The bodies of the queue's live messages by id ({} when the node holds no log)."""
    out: dict[int, bytes] = {}
    for msg_id, record in (live_records(data_dir, vhost, name) or {}).items():
        message = decode_record(record)
        assert message is not None  # live_records read it whole
        out[msg_id] = message.body
    return out
