"""``Stream.truncate``: a returning copy of a replicated stream drops what it does not share
with the new leader; what is left must equal a copy that never held the dropped chunks."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from sievemq.storage import StorageError
from sievemq.storage.segment import index_name, list_segments, segment_name
from sievemq.storage.stream import Stream, StreamConfig
from sievemq.storage.types import Message

CONFIG = StreamConfig(max_segment_bytes=3000)


def _batch(i: int) -> list[Message]:
    return [Message((f"v{i % 5}",), "ex", "rk", b"", f"m{i}.{k}".encode() * 9) for k in range(3)]


def _fill(stream: Stream, batches: range) -> list[int]:
    """Append the batches (timestamps fixed, so two streams write the same bytes)."""
    return [stream.append(_batch(i), timestamp_ms=1_000 + i) for i in batches]


def _same_files(a: Path, b: Path) -> None:
    segments = list_segments(a)
    assert list_segments(b) == segments
    names = [segment_name(s) for s in segments] + [index_name(s) for s in segments]
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    assert (mismatch, errors) == ([], [])


def _messages(stream: Stream) -> list[bytes]:
    reader = stream.reader()
    out: list[bytes] = []
    try:
        reader.seek_offset(stream.first_offset)
        while chunks := reader.read_stored():
            out += [c.data for c in chunks]
    finally:
        reader.close()
    return out


@pytest.mark.parametrize("cut", [10, 17, 1, 0])
def test_truncated_copy_equals_one_that_never_held_the_rest(tmp_path: Path, cut: int) -> None:
    long = Stream.open(tmp_path / "long", CONFIG)
    short = Stream.open(tmp_path / "short", CONFIG)
    try:
        firsts = _fill(long, range(40))
        _fill(short, range(cut))
        assert len(list_segments(tmp_path / "long")) >= 3  # the cut crosses segments
        dropped = long.truncate(firsts[cut])
        assert dropped == (40 - cut) * 3
        assert long.end_offset == short.end_offset == cut * 3
        assert long.last_chunk_id == short.last_chunk_id
        _same_files(tmp_path / "long", tmp_path / "short")
        # and it goes on as one stream: the same appends give the same files
        _fill(long, range(100, 112))
        _fill(short, range(100, 112))
        _same_files(tmp_path / "long", tmp_path / "short")
        assert _messages(long) == _messages(short)
    finally:
        long.close()
        short.close()
    reopened = Stream.open(tmp_path / "long", CONFIG)  # durable as it was left
    try:
        assert reopened.end_offset == (cut + 12) * 3
    finally:
        reopened.close()


def test_truncate_refuses_an_offset_inside_a_chunk(tmp_path: Path) -> None:
    stream = Stream.open(tmp_path / "s", CONFIG)
    try:
        firsts = _fill(stream, range(5))
        with pytest.raises(StorageError, match="not the first offset of a chunk"):
            stream.truncate(firsts[2] + 1)
        assert stream.end_offset == 15
        assert stream.truncate(15) == 0  # at the end: nothing
        assert stream.truncate(99) == 0
    finally:
        stream.close()
