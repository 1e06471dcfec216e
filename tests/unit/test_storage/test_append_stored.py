"""A replica's copy of a stream: chunks read as stored and appended as they came give
files byte-identical to the original's (the cluster's stream replication relies on it)."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from sievemq.storage import StorageError
from sievemq.storage.segment import list_segments, segment_name
from sievemq.storage.stream import Stream, StreamConfig
from sievemq.storage.types import Message


def _batch(i: int) -> list[Message]:
    return [
        Message((f"v{(i + k) % 7}",), "ex", "rk", b"", f"body {i} {k}".encode() * 3)
        for k in range(1 + i % 5)
    ]


def _copy(source: Stream, target: Stream) -> int:
    reader = source.reader()
    reader.seek_offset(target.end_offset)
    copied = 0
    try:
        while chunks := reader.read_stored():
            for chunk in chunks:
                target.append_stored(chunk.data)
                copied += 1
    finally:
        reader.close()
    return copied


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_copied_chunks_give_identical_files(tmp_path: Path, compression: str) -> None:
    config = StreamConfig(max_segment_bytes=4000, compression=compression)
    leader = Stream.open(tmp_path / "leader", config)
    replica = Stream.open(tmp_path / "replica", config)
    try:
        for i in range(60):
            leader.append(_batch(i), extra=b"\x01\x02" if i % 3 == 0 else b"")
            if i == 25:
                assert _copy(leader, replica) == 26  # a first copy, then the rest: resumes
        _copy(leader, replica)
        assert replica.end_offset == leader.end_offset
        segments = list_segments(tmp_path / "leader")
        assert len(segments) >= 2  # rolled over at the same chunks
        assert list_segments(tmp_path / "replica") == segments
        names = [segment_name(s) for s in segments]
        _, mismatch, errors = filecmp.cmpfiles(
            tmp_path / "leader", tmp_path / "replica", names, shallow=False
        )
        assert (mismatch, errors) == ([], [])
    finally:
        leader.close()
        replica.close()


def test_a_chunk_not_at_the_end_or_damaged_is_refused(tmp_path: Path) -> None:
    leader = Stream.open(tmp_path / "leader", StreamConfig())
    replica = Stream.open(tmp_path / "replica", StreamConfig())
    try:
        leader.append(_batch(1))
        leader.append(_batch(2))
        reader = leader.reader()
        first, second = reader.read_stored()
        reader.close()
        with pytest.raises(StorageError, match="the stream ends at 0"):
            replica.append_stored(second.data)
        damaged = bytearray(first.data)
        damaged[-1] ^= 0xFF
        with pytest.raises(StorageError, match="does not match"):
            replica.append_stored(bytes(damaged))
        with pytest.raises(StorageError, match="bad header"):
            replica.append_stored(first.data[:20])
        assert replica.end_offset == 0
        replica.append_stored(first.data)
        assert replica.end_offset == first.records
    finally:
        leader.close()
        replica.close()
