"""StreamReader: osiris seek semantics and Bloom-filtered reads that skip chunk bodies."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.storage import FilterSpec, Stream, StreamConfig, StreamReader

from .storage_helpers import msg, read_all


@pytest.fixture
def stream(tmp_path: Path) -> Stream:
    """Chunks of 3 at offsets 0, 3, 6, 9 with timestamps 1000, 2000, 3000, 4000."""
    s = Stream.open(tmp_path / "s", StreamConfig(max_segment_bytes=200))
    for i in range(4):
        s.append([msg(f"{i}-{j}".encode()) for j in range(3)], timestamp_ms=1000 * (i + 1))
    return s


def offsets(reader: StreamReader) -> list[int]:
    return [r.offset for r in read_all(reader)]


def test_seek_first_and_next(stream: Stream) -> None:
    r = stream.reader()
    r.seek_first()
    assert offsets(r) == list(range(12))
    r.seek_next()
    assert r.position == 12 and r.read(10) == [] and r.at_end
    stream.append([msg()])
    assert offsets(r) == [12]


def test_seek_last_delivers_the_whole_last_chunk(stream: Stream) -> None:
    r = stream.reader()
    r.seek_last()
    assert offsets(r) == [9, 10, 11]


def test_seek_last_on_empty_stream_is_next(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "e", StreamConfig())
    r = s.reader()
    r.seek_last()
    s.append([msg()])
    assert offsets(r) == [0]


def test_seek_offset_inside_a_chunk_skips_records_below(stream: Stream) -> None:
    r = stream.reader()
    r.seek_offset(7)
    assert r.position == 7
    assert offsets(r) == [7, 8, 9, 10, 11]


@pytest.mark.parametrize("target", [-5, 0])
def test_seek_offset_below_first_is_first(stream: Stream, target: int) -> None:
    r = stream.reader()
    r.seek_offset(target)
    assert offsets(r)[0] == 0


def test_seek_offset_past_end_waits_for_that_offset(stream: Stream) -> None:
    r = stream.reader()
    r.seek_offset(14)
    assert r.read(10) == [] and r.at_end
    stream.append([msg(), msg(), msg(), msg()])  # 12..15
    assert offsets(r) == [14, 15]


@pytest.mark.parametrize(
    ("ts", "expected_first"), [(0, 0), (1000, 0), (1500, 3), (2000, 3), (4000, 9)]
)
def test_seek_timestamp_attaches_at_first_chunk_not_older(
    stream: Stream, ts: int, expected_first: int
) -> None:
    r = stream.reader()
    r.seek_timestamp(ts)
    assert offsets(r)[0] == expected_first


def test_seek_timestamp_newer_than_everything_is_next(stream: Stream) -> None:
    r = stream.reader()
    r.seek_timestamp(99_999)
    assert r.read(10) == [] and r.position == 12


def test_max_records_keeps_the_rest_of_the_chunk(stream: Stream) -> None:
    r = stream.reader()
    assert [x.offset for x in r.read(2)] == [0, 1]
    assert r.position == 2 and not r.at_end
    assert [x.offset for x in r.read(2)] == [2, 3]
    assert offsets(r) == list(range(4, 12))


def test_max_chunks_bounds_one_call(stream: Stream) -> None:
    r = stream.reader()
    spec = FilterSpec(("nothing",))
    assert r.read(10, spec, max_chunks=2) == []
    assert not r.at_end and r.stats.chunks_scanned == 2
    assert r.read(10, spec, max_chunks=2) == [] and r.at_end


def test_bloom_skips_chunks_without_reading_their_body(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig(filter_size_bytes=64))
    body = b"x" * 10_000
    for i in range(20):
        s.append([msg(body, f"common-{i % 5}") for _ in range(10)])
    s.append([msg(b"rare!", "rare")])
    r = s.reader()
    got = read_all(r, spec=FilterSpec(("rare",)))
    assert [x.body for x in got] == [b"rare!"]
    assert r.stats.chunks_scanned == 21
    assert r.stats.chunks_skipped + r.stats.chunks_false_positive == 20
    assert r.stats.chunks_skipped >= 18
    # skipped chunks cost a header read only: far less than one body
    bodies = r.stats.chunks_false_positive * 10 * len(body)
    assert r.stats.bytes_read < bodies + 21 * 200 + 100
    assert r.stats.records_matched == 1
    # an unfiltered reader reads every chunk whole: its bytes are what filtering is measured by
    plain = s.reader()
    read_all(plain)
    assert plain.stats.bytes_unfiltered == r.stats.bytes_unfiltered
    assert r.stats.bytes_unfiltered > 20 * 10 * len(body) > 10 * r.stats.bytes_read
    assert plain.stats.bytes_read >= plain.stats.bytes_unfiltered


def test_false_positive_chunk_is_counted_and_filtered_exactly(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    # 16 B filter with 300 values: nearly every bit is set, so any probe is a false positive
    s.append([msg(b"v", f"value-{i}") for i in range(300)])
    r = s.reader()
    assert read_all(r, spec=FilterSpec(("absent",))) == []
    assert r.stats.chunks_false_positive == 1 and r.stats.records_skipped == 300


def test_match_unfiltered_and_match_all(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append([msg(b"none")])  # chunk without any filter value: no Bloom bytes
    s.append([msg(b"a", "a"), msg(b"ab", "a", "b"), msg(b"plain")])
    r = s.reader()
    assert [x.body for x in read_all(r, spec=FilterSpec(("a",)))] == [b"a", b"ab"]
    assert r.stats.chunks_skipped == 1
    r = s.reader()
    spec = FilterSpec(("b",), match_unfiltered=True)
    assert [x.body for x in read_all(r, spec=spec)] == [b"none", b"ab", b"plain"]
    r = s.reader()
    assert [x.body for x in read_all(r, spec=FilterSpec(("a", "b"), match_all=True))] == [b"ab"]


def test_predicate_runs_after_the_spec(stream: Stream) -> None:
    r = stream.reader()
    got = read_all(r, predicate=lambda rec: rec.body.endswith(b"-1"))
    assert [x.offset for x in got] == [1, 4, 7, 10]
    assert r.stats.records_skipped == 8


def test_standalone_reader_sees_the_valid_data_on_disk(stream: Stream) -> None:
    r = StreamReader.open(stream.directory)
    assert offsets(r) == list(range(12))
    stream.append([msg()])
    assert offsets(r) == [12]  # re-reads the bound when it reaches it
    r.close()


def test_readers_are_independent(stream: Stream) -> None:
    a, b = stream.reader(), stream.reader()
    assert [x.offset for x in a.read(4)] == [0, 1, 2, 3]
    assert [x.offset for x in b.read(1)] == [0]
    a.close()
    assert [x.offset for x in b.read(1)] == [1]
