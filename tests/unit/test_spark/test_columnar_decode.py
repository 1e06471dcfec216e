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
from sievemq.spark import columnar
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


# -- long bodies: pieces of the run and the body column copied from Arrow binary views ------

LONG_SIZES = [3, 40, 1, 1, 25, 2, 60, 5]  # records per chunk: small and bigger neighbours
LONG_END = sum(LONG_SIZES)


def long_message(c: int, i: int) -> Message:
    size = 13 + (c * 37 + i * 101) % 700  # always past Arrow's 12 inline bytes
    body = bytes((c + i + k) % 251 for k in range(size))
    return Message((f"v{c % 3}",) if i % 3 else (), "", f"rk-{i}", b"\x00\x00", body)


@pytest.fixture(scope="module")
def long_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = stream_directory(tmp_path_factory.mktemp("columnar-long"), "/", "s")
    d.mkdir(parents=True)
    with Stream.open(d, StreamConfig(max_segment_bytes=40_000)) as stream:
        for c, count in enumerate(LONG_SIZES):
            stream.append([long_message(c, i) for i in range(count)], timestamp_ms=T0 + c)
    return d


# (_JOIN_BYTES, _PIECE_BYTES): one joined run; every chunk alone; small chunks grouped
PIECES = [(1 << 30, 1 << 19), (0, 0), (0, 3000)]


@pytest.mark.parametrize(("join_bytes", "piece_bytes"), PIECES)
@pytest.mark.parametrize(("start", "until"), [(0, LONG_END), (2, LONG_END - 7), (45, 80)])
def test_long_bodies_in_pieces(
    long_directory: Path,
    monkeypatch: pytest.MonkeyPatch,
    join_bytes: int,
    piece_bytes: int,
    start: int,
    until: int,
) -> None:
    monkeypatch.setattr(columnar, "_JOIN_BYTES", join_bytes)
    monkeypatch.setattr(columnar, "_PIECE_BYTES", piece_bytes)
    monkeypatch.setattr(columnar, "_VIEW_BODY", 0)
    gathered: list[int] = []
    gather = ChunkDecoder._gather

    def spy(self: ChunkDecoder, pieces: Any, field: int) -> Any:
        gathered.append(field)
        return gather(self, pieces, field)

    monkeypatch.setattr(ChunkDecoder, "_gather", spy)
    settings = ReadSettings(("offset", "filter_value", "routing_key", "body"))
    got = rows(long_directory, start, until, settings)
    want = expected(long_directory, start, until, None, None)
    assert got == [
        {
            "offset": r.offset,
            "filter_value": r.filter_values[0] if r.filter_values else None,
            "routing_key": r.routing_key,
            "body": r.body,
        }
        for r in want
    ]
    assert gathered and columnar._BODY not in gathered  # the bodies came from views


def test_a_short_body_takes_the_plain_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value of up to 12 bytes would be inline in a view: such a run copies with take."""
    monkeypatch.setattr(columnar, "_JOIN_BYTES", 0)
    monkeypatch.setattr(columnar, "_VIEW_BODY", 0)
    d = stream_directory(tmp_path, "/", "s")
    d.mkdir(parents=True)
    bodies = [b"x" * 300, b"twelve bytes", b"", b"y" * 13]
    with Stream.open(d, StreamConfig()) as stream:
        for body in bodies:
            stream.append([Message((), "", "k", b"\x00\x00", body)] * 2, timestamp_ms=T0)
    got = rows(d, 0, 8, ReadSettings(("body",)))
    assert [r["body"] for r in got] == [b for b in bodies for _ in range(2)]
