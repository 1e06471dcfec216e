"""Recovery on open: one test per crash window (docs/storage-format.md, "Recovery on open")."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sievemq.storage import Message, Stream, StreamConfig, StreamReader
from sievemq.storage.tools import verify
from sievemq.storage.types import KIND_STREAM

SEG0 = "00000000000000000000.segment"
IDX0 = "00000000000000000000.index"


_KIND = [0]  # the record kind _msg writes (the fixture below runs every test with both)


@pytest.fixture(autouse=True, params=[0, KIND_STREAM], ids=["amqp-records", "stream-records"])
def _record_kind(request: pytest.FixtureRequest) -> None:
    """Each crash window once with 0-9-1 records (record-table layout) and once with
    stream-protocol records (osiris layout, docs/storage-format.md)."""
    _KIND[0] = request.param


def _msg(i: int) -> Message:
    body = f"body-{i}".encode() * 5
    if _KIND[0] == KIND_STREAM:
        return Message((f"v{i % 3}",), "", "", b"\x00" * 8 + b"ref", body, KIND_STREAM)
    return Message((f"v{i % 3}",), "ex", f"rk{i}", b"\x80\x00", body)


def _build(directory: Path, chunks: int = 4, per_chunk: int = 3, **cfg: int) -> list[int]:
    """Write chunks; returns the file position where each chunk starts."""
    s = Stream.open(directory, StreamConfig(**cfg))  # type: ignore[arg-type]
    positions = []
    for c in range(chunks):
        positions.append(s.stats().bytes)
        s.append([_msg(c * per_chunk + j) for j in range(per_chunk)], timestamp_ms=1000 + c)
    s.close()
    return positions


def _reopen_holds(directory: Path, count: int) -> None:
    """The stream reopens, reads exactly offsets 0..count-1, verifies clean and appends on."""
    s = Stream.open(directory, StreamConfig())
    assert s.end_offset == count
    r = s.reader()
    got = []
    while True:
        got.extend(r.read(1000))
        if r.at_end:
            break
    assert [x.offset for x in got] == list(range(count))
    assert [x.body for x in got] == [_msg(i).body for i in range(count)]
    chunks = s.reader().read_chunks(1000, osiris=True)
    assert {c.osiris for c in chunks} == {_KIND[0] == KIND_STREAM}  # the layout as written
    out = io.StringIO()
    assert verify(directory, out) == 0, out.getvalue()
    assert s.append([_msg(count)]) == count
    s.close()
    assert [x.offset for x in StreamReader.open(directory).read(1000)][-1] == count


def test_truncating_the_last_chunk_at_every_byte_keeps_all_complete_chunks(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base"
    positions = _build(base)
    last = positions[-1]
    data = (base / SEG0).read_bytes()
    index = (base / IDX0).read_bytes()
    for cut in range(last, len(data)):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / SEG0).write_bytes(data[:cut])
        (d / IDX0).write_bytes(index)  # the index still names the torn chunk
        Stream.open(d, StreamConfig()).close()
        assert (d / SEG0).stat().st_size == last  # the torn bytes are cut off
        _reopen_holds(d, 9)


def test_bad_crc_in_last_chunk_drops_that_chunk(tmp_path: Path) -> None:
    _build(tmp_path)
    seg = tmp_path / SEG0
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0x55
    seg.write_bytes(bytes(data))
    _reopen_holds(tmp_path, 9)


def test_bad_header_crc_in_last_chunk_drops_that_chunk(tmp_path: Path) -> None:
    positions = _build(tmp_path)
    seg = tmp_path / SEG0
    data = bytearray(seg.read_bytes())
    data[positions[-1] + 20] ^= 0x01  # the timestamp field
    seg.write_bytes(bytes(data))
    _reopen_holds(tmp_path, 9)


def test_index_entries_past_the_end_of_the_segment_are_dropped(tmp_path: Path) -> None:
    positions = _build(tmp_path)
    os.truncate(tmp_path / SEG0, positions[2])  # two whole chunks gone, index keeps 4 entries
    _reopen_holds(tmp_path, 6)
    assert (tmp_path / IDX0).stat().st_size == 8 + 3 * 24  # 2 old + 1 appended by the check


def test_zeroed_and_torn_index_tail_is_cut(tmp_path: Path) -> None:
    _build(tmp_path)
    with (tmp_path / IDX0).open("ab") as f:
        f.write(bytes(24 * 2) + b"\x00\x00\x07")
    _reopen_holds(tmp_path, 12)


def test_chunk_written_but_its_index_entry_not_is_reindexed(tmp_path: Path) -> None:
    _build(tmp_path)
    idx = tmp_path / IDX0
    os.truncate(idx, idx.stat().st_size - 24)  # crash between the two writes
    _reopen_holds(tmp_path, 12)


def test_segment_without_its_index_gets_one_rebuilt(tmp_path: Path) -> None:
    _build(tmp_path, chunks=8, max_segment_bytes=400)
    segments = sorted(tmp_path.glob("*.segment"))
    assert len(segments) >= 3
    for seg in segments[:2]:  # an old one and a middle one
        seg.with_suffix(".index").unlink()
    _reopen_holds(tmp_path, 24)
    assert all(seg.with_suffix(".index").exists() for seg in segments)


def test_empty_last_segment_is_removed(tmp_path: Path) -> None:
    _build(tmp_path)
    name = f"{12:020d}"
    (tmp_path / f"{name}.segment").write_bytes(b"SQSG\x00\x00\x00\x01")  # rolled, then crash
    (tmp_path / f"{name}.index").write_bytes(b"")
    _reopen_holds(tmp_path, 12)


def test_zero_length_last_segment_with_a_wrong_name_is_removed(tmp_path: Path) -> None:
    _build(tmp_path)
    (tmp_path / f"{99:020d}.segment").write_bytes(b"")
    _reopen_holds(tmp_path, 12)
    assert not (tmp_path / f"{99:020d}.segment").exists()


def test_orphan_files_are_removed(tmp_path: Path) -> None:
    _build(tmp_path)
    orphan = tmp_path / f"{500:020d}.index"
    orphan.write_bytes(b"SQIX\x00\x00\x00\x01")
    (tmp_path / "offsets.log.tmp").write_bytes(b"half a compaction")
    _reopen_holds(tmp_path, 12)
    assert not orphan.exists()
    assert not (tmp_path / "offsets.log.tmp").exists()


def test_only_segment_empty_or_headerless_recovers_as_empty_stream(tmp_path: Path) -> None:
    (tmp_path / SEG0).write_bytes(b"SQ")
    s = Stream.open(tmp_path, StreamConfig())
    assert s.end_offset == 0
    assert s.append([_msg(0)]) == 0
    s.close()
    _reopen_holds(tmp_path, 1)


def test_segment_of_another_format_is_refused(tmp_path: Path) -> None:
    from sievemq.storage import StorageError

    (tmp_path / SEG0).write_bytes(b"OSIL\x00\x00\x00\x01")
    with pytest.raises(StorageError):
        Stream.open(tmp_path, StreamConfig())
