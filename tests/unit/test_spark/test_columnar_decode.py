"""The columnar chunk decoder (Spark executors) gives exactly what the row decoder gives.

No JVM: ``read_range`` is the function the executors run; the expected rows come from
storage's own ``StreamReader.read`` (the consumer's path) over the same files.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pamqp import commands, header

from sievemq.filtering.sql import compile_filter
from sievemq.filtering.view import sql_predicate
from sievemq.spark.arrow_read import RangeTask, ReadSettings, read_range
from sievemq.spark.columnar import ChunkDecoder
from sievemq.spark.schema import arrow_schema, source_schema
from sievemq.storage import (
    FilterSpec,
    Message,
    Record,
    StorageError,
    Stream,
    StreamConfig,
    StreamReader,
)
from sievemq.storage.layout import stream_directory
from sievemq.storage.reader import RawChunk

T0 = 1_700_000_000_000
END = sum(7 + c % 4 for c in range(30))  # messages written (the committed end)
UTC = datetime.UTC


def props(**kwargs: object) -> bytes:
    return header.ContentHeader(0, 0, commands.Basic.Properties(**kwargs)).marshal()[12:]


def message(c: int, i: int) -> Message:
    """A mix: one value, none, several values, unicode, a stream-protocol-free AMQP record."""
    shape = i % 4
    values: tuple[str, ...] = [(f"v{c % 5}",), (), (f"v{c % 5}", "x\u00e9"), ("",)][shape]
    return Message(
        values,
        "amq.direct" if i % 2 else "",
        f"rk-{c}-{i % 3}",
        props(content_type="text/plain", headers={"n": i % 7}) if i % 5 else b"\x00\x00",
        f"body {c} {i} ".encode() * (i % 3),
    )


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("columnar")
    d = stream_directory(root, "/", "s")
    d.mkdir(parents=True)
    with Stream.open(d, StreamConfig(max_segment_bytes=4000)) as stream:
        for c in range(30):
            stream.append([message(c, i) for i in range(7 + c % 4)], timestamp_ms=T0 + c)
    return d


def expected(
    directory: Path, start: int, until: int, spec: FilterSpec | None, sql: str | None
) -> list[Record]:
    reader = StreamReader(directory, bound=lambda: until)
    reader.seek_offset(start)
    predicate = sql_predicate(compile_filter(sql)) if sql else None
    out: list[Record] = []
    while True:
        out += reader.read(1000, spec, predicate)
        if reader.at_end:
            break
    reader.close()
    return [r for r in out if start <= r.offset < until]


def rows(
    directory: Path, start: int, until: int, settings: ReadSettings, several: bool = False
) -> list[dict[str, Any]]:
    schema = arrow_schema(source_schema(several))
    if settings.columns != tuple(schema.names):
        schema = pa.schema([schema.field(n) for n in settings.columns])
    batches = list(read_range(RangeTask(str(directory), "/", "s", start, until), settings, schema))
    for b in batches:
        assert b.schema == schema
        b.validate(full=True)
        # compact arrays only: Spark's JVM reader misreads sliced ones (it got rows 0..7 of a
        # batch sliced to row 7)
        assert all(column.offset == 0 for column in b.columns)
    return [r for b in batches for r in b.to_pylist()]


CASES = [
    (0, END, None, None),
    (5, END, None, None),  # starts inside the first chunk
    (3, 150, None, None),  # ends inside a chunk
    (0, END, FilterSpec(("v1",)), None),
    (0, END, FilterSpec(("v2", "x\u00e9"), match_unfiltered=True), None),
    (4, 200, FilterSpec(("v3", "x\u00e9"), match_all=True), None),
    (0, END, FilterSpec(("",)), None),
    (0, END, None, "routing_key LIKE 'rk-%-1' AND n > 2"),
    (2, END, FilterSpec(("v4",), match_unfiltered=True), "exchange = 'amq.direct'"),
]


@pytest.mark.parametrize(("start", "until", "spec", "sql"), CASES)
def test_same_rows_as_the_record_reader(
    directory: Path, start: int, until: int, spec: FilterSpec | None, sql: str | None
) -> None:
    want = expected(directory, start, until, spec, sql)
    assert want  # every case selects something
    settings = ReadSettings(
        tuple(source_schema(True).names),
        spec.values if spec else (),
        spec.match_unfiltered if spec else False,
        spec.match_all if spec else False,
        sql,
    )
    got = rows(directory, start, until, settings, several=True)
    assert [r["offset"] for r in got] == [r.offset for r in want]
    for g, w in zip(got, want, strict=True):
        assert g["timestamp"] == datetime.datetime.fromtimestamp(w.timestamp_ms / 1000, UTC)
        assert tuple(g["filter_values"]) == w.filter_values
        assert g["filter_value"] == (w.filter_values[0] if w.filter_values else None)
        assert (g["exchange"], g["routing_key"], g["body"]) == (w.exchange, w.routing_key, w.body)
        assert (g["stream"], g["vhost"]) == ("s", "/")
        if w.properties != b"\x00\x00":
            assert g["properties"]["content_type"] == "text/plain"
            assert dict(g["headers"]).keys() == {"n"}
            assert int(dict(g["headers"])["n"]) in range(7)
        else:
            assert g["properties"]["content_type"] is None and g["headers"] == []


def test_column_subset_in_any_order(directory: Path) -> None:
    settings = ReadSettings(("body", "offset"))
    got = rows(directory, 0, END, settings)
    want = expected(directory, 0, END, None, None)
    assert got == [{"body": r.body, "offset": r.offset} for r in want]


def test_damaged_record_table_is_a_storage_error() -> None:
    schema = arrow_schema(source_schema(False))
    decode = ChunkDecoder(schema, "/", "s")
    # one entry claiming a 200-byte body that is not there
    table = bytes([0]) + (0).to_bytes(4, "big") + bytes([0, 0]) + (0).to_bytes(4, "big")
    table += (200).to_bytes(4, "big")
    with pytest.raises(StorageError, match="record table describes 215 bytes"):
        decode([RawChunk(0, 1, T0, 0, table + b"short")], 10)
    with pytest.raises(StorageError, match="longer than"):
        decode([RawChunk(0, 3, T0, 0, table)], 10)
    huge = table[:11] + (0xFFFFFFF0).to_bytes(4, "big")
    with pytest.raises(StorageError, match="bad record table"):
        decode([RawChunk(0, 1, T0, 0, huge + b"x" * 16)], 10)
