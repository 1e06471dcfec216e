"""The sink's option parsing and row encoding, without a JVM."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sievemq.spark.options import OptionError
from sievemq.spark.sink import ColumnError, SinkOptions, parse_sink_options, rows_of

URI = "amqp://user:secret@127.0.0.1:5672/%2F"


def test_options_parse_and_the_uri_hides_its_password() -> None:
    opts = parse_sink_options({"uri": URI, "STREAM": "out", "queryid": "q", "batchid": "7"})
    assert opts == SinkOptions(URI, "out", "", "q", 7)
    assert "secret" not in opts.safe_uri and opts.safe_uri.startswith("amqp://user@127.0.0.1")
    # Spark passes the checkpoint location to a streaming sink: not an error
    assert parse_sink_options({"uri": URI, "stream": "o", "checkpointLocation": "/c"}).stream == "o"


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"stream": "o"}, "uri"),
        ({"uri": "amqp://h:notaport/", "stream": "o"}, "uri"),
        ({"uri": URI}, "stream"),
        ({"uri": URI, "stream": "a,b"}, "stream"),
        ({"uri": URI, "stream": "o", "path": "/x"}, "path"),
        ({"uri": URI, "stream": "o", "queryId": "q"}, "batchId"),
        ({"uri": URI, "stream": "o", "queryId": "q", "batchId": "x"}, "batchId"),
        ({"uri": URI, "stream": "o", "queryId": "q", "batchId": "-1"}, "batchId"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_sink_options(options)
    assert info.value.option.lower() == option.lower()


SCHEMA = pa.schema(
    [
        ("body", pa.binary()),
        ("filter_values", pa.list_(pa.string())),
        ("headers", pa.map_(pa.string(), pa.string())),
    ]
)


def test_rows_carry_body_filter_values_and_sorted_headers() -> None:
    batch = pa.RecordBatch.from_pylist(
        [
            {"body": b"b", "filter_values": ["x", "", "y"], "headers": [("z", "1"), ("a", "2")]},
            {"body": b"a", "filter_values": None, "headers": None},
        ],
        schema=SCHEMA,
    )
    rows = list(rows_of([batch], "out"))
    assert rows == [
        (b"b", "out", ("x", "y"), (("a", "2"), ("z", "1"))),
        (b"a", "out", (), ()),
    ]
    # the canonical order a micro-batch is numbered in does not depend on arrival order
    swapped = pa.RecordBatch.from_pylist(batch.to_pylist()[::-1], schema=SCHEMA)
    assert sorted(rows_of([swapped], "out")) == sorted(rows)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ({"body": None, "filter_values": None, "headers": None}, "body"),
        (
            {"body": b"x", "filter_values": None, "headers": [("x-sievemq-publisher", "r")]},
            "headers",
        ),
        (
            {"body": b"x", "filter_values": None, "headers": [("x-stream-filter-value", "v")]},
            "headers",
        ),
    ],
)
def test_bad_rows_name_the_column(row: dict[str, object], column: str) -> None:
    batch = pa.RecordBatch.from_pylist([row], schema=SCHEMA)
    with pytest.raises(ColumnError) as info:
        list(rows_of([batch], "out"))
    assert info.value.column == column
