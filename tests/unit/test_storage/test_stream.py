"""Stream writer: offsets, one chunk per append, listeners, durability, roll-over, retention."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sievemq.storage import (
    Durability,
    Message,
    StorageError,
    Stream,
    StreamConfig,
    StreamReader,
)

from .storage_helpers import files, msg, read_all


def test_append_returns_first_offset_and_moves_end(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    assert (s.first_offset, s.end_offset) == (0, 0)
    assert s.append([msg(b"a"), msg(b"b")]) == 0
    assert s.append([msg(b"c")]) == 2
    assert s.end_offset == 3
    st = s.stats()
    assert (st.messages, st.chunks, st.segments, st.first_offset, st.last_offset) == (3, 2, 1, 0, 2)
    s.close()


def test_records_come_back_exactly_as_stored(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    stored = [
        Message((), "", "q", b"", b""),
        Message(("emea",), "ex", "rk.é", b"\x90\x00\x05hello", b"x" * 70000),
        Message(("a", "b", "ünï"), "amq.topic", "r" * 255, bytes(range(256)), b"\x00\xff"),
    ]
    s.append(stored, timestamp_ms=1234)
    records = read_all(s.reader())
    assert [r.offset for r in records] == [0, 1, 2]
    assert all(r.timestamp_ms == 1234 for r in records)
    assert [Message(*r[2:]) for r in records] == stored
    s.close()


def test_one_append_is_one_chunk_and_one_index_entry(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    for _ in range(5):
        s.append([msg() for _ in range(10)])
    assert s.stats().chunks == 5
    assert (tmp_path / "s" / "00000000000000000000.index").stat().st_size == 8 + 5 * 24
    s.close()


def test_listeners_get_the_new_end_after_every_commit(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    seen: list[int] = []
    s.add_listener(seen.append)
    s.append([msg(), msg()])
    s.append([msg()])
    s.remove_listener(seen.append)
    s.append([msg()])
    assert seen == [2, 3]
    s.close()


def test_reader_never_passes_end_offset(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    r = s.reader()
    assert r.read(10) == [] and r.at_end
    s.append([msg(b"1")])
    assert [x.body for x in r.read(10)] == [b"1"]
    assert r.at_end
    s.append([msg(b"2"), msg(b"3")])
    assert [x.offset for x in r.read(10)] == [1, 2]
    s.close()


def test_reopen_keeps_everything_and_continues_offsets(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append([msg(b"1"), msg(b"2")], timestamp_ms=1000)
    s.close()
    s = Stream.open(tmp_path / "s", StreamConfig())
    assert s.end_offset == 2
    assert s.append([msg(b"3")]) == 2
    assert [r.body for r in read_all(s.reader())] == [b"1", b"2", b"3"]
    s.close()


def test_timestamps_never_go_backwards(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append([msg()], timestamp_ms=5000)
    s.append([msg()], timestamp_ms=4000)
    assert [r.timestamp_ms for r in read_all(s.reader())] == [5000, 5000]
    s.close()


def test_segments_roll_over_by_size_and_readers_follow(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig(max_segment_bytes=1000))
    r = s.reader()
    for i in range(30):
        s.append([msg(bytes([i]) * 100)])
    names = [n for n in files(tmp_path / "s") if n.endswith(".segment")]
    assert len(names) > 3
    # each segment is named after the offset of its first chunk
    assert names[1] == f"{int(names[1][:20]):020d}.segment" and int(names[1][:20]) > 0
    assert [x.body[0] for x in read_all(r)] == list(range(30))
    assert [x.offset for x in read_all(StreamReader.open(tmp_path / "s"))] == list(range(30))
    s.close()


def test_zstd_compression_is_flagged_per_chunk_and_reads_back(tmp_path: Path) -> None:
    plain = Stream.open(tmp_path / "p", StreamConfig())
    packed = Stream.open(tmp_path / "z", StreamConfig(compression="zstd"))
    batch = [msg(b"hello world " * 50, "v") for _ in range(50)]
    plain.append(batch)
    packed.append(batch)
    assert packed.stats().bytes < plain.stats().bytes / 5
    assert [r.body for r in read_all(packed.reader())] == [m.body for m in batch]
    plain.close()
    packed.close()


def test_retention_by_bytes_deletes_old_segments_keeps_newest(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig(max_segment_bytes=1000, max_bytes=3000))
    for _ in range(40):
        s.append([msg(b"x" * 200)])
    st = s.stats()
    assert st.bytes <= 3000 + 1000 and st.first_offset > 0
    r = s.reader()
    got = read_all(r)
    assert got[0].offset == s.first_offset and got[-1].offset == 39
    s.close()


def test_retention_by_age_deletes_segments_whose_last_chunk_is_old(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig(max_segment_bytes=300, max_age_ms=10_000))
    base = int(time.time() * 1000) + 60_000  # in the future: the roll-over check keeps all
    for i in range(10):
        s.append([msg(b"x" * 300)], timestamp_ms=base + 1_000 * i)
    assert s.stats().segments == 10
    # limit = base + 5 s: segments whose last chunk is at 0..4 s are older
    assert s.apply_retention(now_ms=base + 15_000) == 5
    assert s.first_offset == 5
    assert s.apply_retention(now_ms=base + 10**9) == 4  # never the newest
    assert s.stats().segments == 1 and s.first_offset == 9
    s.close()


def test_reader_positioned_in_deleted_segment_jumps_to_first(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig(max_segment_bytes=300, max_age_ms=10))
    base = int(time.time() * 1000) + 60_000
    s.append([msg(b"x" * 300)], timestamp_ms=base)
    r = s.reader()
    for _ in range(4):
        s.append([msg(b"x" * 300)], timestamp_ms=base + 10_000)
    assert s.apply_retention(now_ms=base + 10_005) == 1
    assert [x.offset for x in read_all(r)] == [0, 1, 2, 3, 4]  # first segment fd still open
    r2 = s.reader()
    s.append([msg(b"x" * 300)], timestamp_ms=base + 20_000)
    assert s.apply_retention(now_ms=base + 20_005) == 4
    # r2 still holds segment 1 open and reads it, then jumps over the deleted 2..4
    assert s.first_offset == 5
    assert [x.offset for x in read_all(r2)] == [1, 5]
    s.close()


@pytest.mark.parametrize("durability", list(Durability))
def test_every_durability_stores_and_syncs(tmp_path: Path, durability: Durability) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig(durability=durability))
    s.append([msg()])
    s.sync()
    s.close()
    assert Stream.open(tmp_path / "s", StreamConfig()).end_offset == 1


def test_always_fdatasyncs_before_append_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd), real(fd))[1])
    s = Stream.open(tmp_path / "a", StreamConfig(durability=Durability.ALWAYS))
    s.append([msg()])
    assert calls, "ALWAYS must fdatasync inside append"
    calls.clear()
    b = Stream.open(tmp_path / "b", StreamConfig(durability=Durability.BATCH))
    b.append([msg()])
    assert calls == []
    s.close()
    b.close()


def test_failed_write_commits_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append([msg(b"ok")])
    seen: list[int] = []
    s.add_listener(seen.append)

    def fail(fd: int, buffers: list[bytes]) -> int:
        os.write(fd, buffers[0][:10])  # a partial write, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "writev", fail)
    with pytest.raises(StorageError):
        s.append([msg(b"lost")])
    monkeypatch.undo()
    assert s.end_offset == 1 and seen == []
    assert s.append([msg(b"next")]) == 1
    assert [r.body for r in read_all(s.reader())] == [b"ok", b"next"]
    s.close()
    assert [r.body for r in read_all(StreamReader.open(tmp_path / "s"))] == [b"ok", b"next"]


def test_empty_append_and_closed_stream_are_errors(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    with pytest.raises(ValueError):
        s.append([])
    s.close()
    with pytest.raises(StorageError):
        s.append([msg()])


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        StreamConfig(filter_size_bytes=8)
    with pytest.raises(ValueError):
        StreamConfig(compression="lz4")


def test_delete_removes_the_directory(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append([msg()])
    s.offsets.set("c1", 0)
    s.delete()
    assert not (tmp_path / "s").exists()


def test_the_largest_filter_values_the_spec_allows_round_trip(tmp_path: Path) -> None:
    """Up to 64 values of up to 4096 bytes each, on one message (the publish limits)."""
    values = (*tuple(f"{i:02d}" + chr(ord("a") + i % 26) * 4094 for i in range(63)), "é" * 2048)
    with Stream.open(tmp_path / "s", StreamConfig()) as stream:
        stream.append([Message(values, "", "rk", b"\x00\x00", b"body")])
        stream.append([Message(("a" * 300, "b"), "", "rk", b"\x00\x00", b"two")])
        reader = stream.reader()
        reader.seek_first()
        records = reader.read(10)
    assert [r.filter_values for r in records] == [values, ("a" * 300, "b")]
    assert [r.body for r in records] == [b"body", b"two"]


def test_a_message_the_format_cannot_hold_is_a_storage_error_and_commits_nothing(
    tmp_path: Path,
) -> None:
    with Stream.open(tmp_path / "s", StreamConfig()) as stream:
        with pytest.raises(StorageError):
            stream.append([Message(("x" * 70_000, "y"), "", "rk", b"\x00\x00", b"b")])
        assert stream.end_offset == 0
        stream.append([Message(("ok",), "", "rk", b"\x00\x00", b"b")])
        assert stream.end_offset == 1


def test_a_chunk_whose_record_table_does_not_fit_its_data_is_a_storage_error(
    tmp_path: Path,
) -> None:
    from sievemq.storage.chunk import check_record_table, decode_records, encode_chunk

    buffers = encode_chunk([Message(("v",), "", "rk", b"\x00\x00", b"body")], 0, 0, 16)
    raw = b"".join(buffers[-2:])  # the record table and the payloads
    assert check_record_table(raw, 1) is None
    assert check_record_table(raw + b"junk", 1) is not None
    assert check_record_table(raw[:5], 1) is not None
    with pytest.raises(StorageError):
        decode_records(raw[:5], 1, 0, 0, 0, None)
