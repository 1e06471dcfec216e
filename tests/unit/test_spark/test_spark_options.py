"""Option parsing and planning of the sievemq Spark source, without a JVM."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual, StringStartsWith

from sievemq.spark.options import OptionError, parse_options
from sievemq.spark.planning import (
    Bounds,
    ChunkInfo,
    StreamRef,
    plan_ranges,
    split_for_min_partitions,
)
from sievemq.spark.pushdown import Pushed, push


def test_options_parse_with_any_key_case() -> None:
    o = parse_options(
        {
            "path": "/d",
            "stream": "a, b",
            "startingoffsets": '{"/": {"a": -2, "b": 7}}',
            "ENDINGOFFSETS": "latest",
            "startingTimestamp": "2024-01-01T00:00:00Z",
            "filterValues": '["x", "y,z"]',
            "matchUnfiltered": "TRUE",
            "filterMatchType": "all",
            "minPartitions": "3",
        }
    )
    assert o.streams == ("a", "b") and o.several
    assert o.starting is not None and o.starting.for_stream("/", "a") == ("earliest", 0)
    assert o.starting.for_stream("/", "b") == ("offset", 7)
    assert o.starting_timestamp_ms == 1_704_067_200_000
    assert o.filter_values == ("x", "y,z") and o.match_unfiltered and o.match_all
    assert o.min_partitions == 3 and o.data_dir == Path("/d")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"stream": "a"}, "path"),
        ({"path": "/d"}, "stream"),
        ({"path": "/d", "stream": "a", "nope": "1"}, "nope"),
        ({"path": "/d", "stream": "a", "startingOffsets": "-5"}, "startingOffsets"),
        ({"path": "/d", "stream": "a", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"path": "/d", "stream": "a", "startingOffsets": '{"/": {"a": -3}}'}, "startingOffsets"),
        ({"path": "/d", "stream": "a", "startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"path": "/d", "stream": "a", "filterValues": ","}, "filterValues"),
        ({"path": "/d", "stream": "a", "matchUnfiltered": "yes"}, "matchUnfiltered"),
        ({"path": "/d", "stream": "a", "sql": "a == 1"}, "sql"),
        ({"path": "/d", "stream": "a", "streamPattern": "("}, "streamPattern"),
        ({"path": "/d", "stream": "a", "maxOffsetsPerTrigger": "5"}, "maxOffsetsPerTrigger"),
        ({"path": "/d", "stream": "a", "maxBytesPerPartition": "0"}, "maxBytesPerPartition"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=f"option '{named}'"):
        parse_options(options)


def test_stream_options_only_on_streams() -> None:
    o = parse_options({"path": "/d", "stream": "a", "maxOffsetsPerTrigger": "5"}, streaming=True)
    assert o.max_offsets_per_trigger == 5
    with pytest.raises(OptionError, match="option 'endingOffsets'"):
        parse_options({"path": "/d", "stream": "a", "endingOffsets": "3"}, streaming=True)


REF = StreamRef("/", "s", "/nowhere")
# 10 chunks of 10 offsets, 100 bytes each, timestamps 1000 ms apart; two segments of 5
CHUNKS = [ChunkInfo(c * 10, c * 10 + 10, c * 1000, 100, 0 if c < 5 else 50) for c in range(10)]


def test_ranges_are_chunk_aligned_and_stay_in_a_segment() -> None:
    ranges = [r for r, _ in plan_ranges(REF, CHUNKS, Bounds(), 1 << 30, None)]
    assert [(r.start, r.until, r.chunks) for r in ranges] == [(0, 50, 5), (50, 100, 5)]
    small = [r for r, _ in plan_ranges(REF, CHUNKS, Bounds(), 250, None)]
    assert [(r.start, r.until) for r in small] == [
        (0, 20),
        (20, 40),
        (40, 50),
        (50, 70),
        (70, 90),
        (90, 100),
    ]


def test_bounds_cut_offsets_exactly_and_drop_chunks_by_timestamp() -> None:
    ranges = [r for r, _ in plan_ranges(REF, CHUNKS, Bounds(lo=15, hi=33), 1 << 30, None)]
    assert [(r.start, r.until, r.chunks) for r in ranges] == [(15, 33, 3)]
    by_ts = Bounds(ts_lo=3_000_000, ts_hi=6_000_000)  # microseconds: chunks 3, 4, 5
    ranges = [r for r, _ in plan_ranges(REF, CHUNKS, by_ts, 1 << 30, None)]
    assert [(r.start, r.until) for r in ranges] == [(30, 50), (50, 60)]


def test_min_partitions_splits_at_chunk_boundaries() -> None:
    planned = plan_ranges(REF, CHUNKS, Bounds(), 1 << 30, None)
    parts = split_for_min_partitions(planned, 4)
    assert len(parts) == 4
    assert [(r.start, r.until) for r in parts] == [(0, 20), (20, 50), (50, 70), (70, 100)]


def test_pushdown_uses_offsets_and_timestamps_exactly_and_returns_the_rest() -> None:
    ts = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    filters = [
        GreaterThan(("offset",), 9),
        LessThanOrEqual(("offset",), 20),
        GreaterThan(("timestamp",), ts),
        EqualTo(("filter_value",), "x"),
        In(("filter_value",), ("x", "y")),
        StringStartsWith(("routing_key",), "a"),
    ]
    pushed = Pushed()
    left = list(push(filters, pushed))
    assert (pushed.bounds.lo, pushed.bounds.hi) == (10, 21)
    assert pushed.bounds.ts_lo == 1_704_067_200_000_001
    assert pushed.filter_values == ("x",)  # = 'x' AND IN ('x', 'y')
    # filter_value is the first value only: Spark re-checks it; offsets/timestamps are exact
    assert left == filters[3:]
