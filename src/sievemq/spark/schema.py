"""The columns of the `sievemq` source, as a Spark StructType and the exact Arrow schema.

Spark checks every Arrow batch a Python source yields against
``to_arrow_schema(schema, timezone="UTC")``: timestamps must be ``timestamp[us, tz=UTC]`` and
nullability must match, so the Arrow schema is derived from the Spark one, never written twice.
A user schema (``.schema("offset BIGINT, body BINARY")``) may pick any subset of the columns in
any order; that is the only projection hook Python sources have, and the reader then skips
decoding what is not asked for (properties and headers are the costly ones).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

PROPERTIES = StructType(
    [
        StructField("content_type", StringType()),
        StructField("content_encoding", StringType()),
        StructField("delivery_mode", ShortType()),
        StructField("priority", ShortType()),
        StructField("correlation_id", StringType()),
        StructField("reply_to", StringType()),
        StructField("expiration", StringType()),
        StructField("message_id", StringType()),
        StructField("timestamp", TimestampType()),
        StructField("type", StringType()),
        StructField("user_id", StringType()),
        StructField("app_id", StringType()),
    ]
)

_BASE: list[StructField] = [
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), False),
    StructField("filter_values", ArrayType(StringType()), False),
    StructField("filter_value", StringType()),
    StructField("exchange", StringType(), False),
    StructField("routing_key", StringType(), False),
    StructField("properties", PROPERTIES, False),
    StructField("headers", MapType(StringType(), StringType()), False),
    StructField("body", BinaryType(), False),
]
_SEVERAL: list[StructField] = [
    StructField("stream", StringType(), False),
    StructField("vhost", StringType(), False),
]
COLUMNS: tuple[str, ...] = tuple(f.name for f in _BASE + _SEVERAL)


def source_schema(several: bool) -> StructType:
    """The full schema; ``stream`` and ``vhost`` columns only when several streams are read."""
    return StructType(_BASE + (_SEVERAL if several else []))


def check_user_schema(schema: StructType, several: bool) -> None:
    """A user schema may select columns, not retype them; raises ValueError naming the column."""
    full = {f.name: f for f in source_schema(True).fields}
    for f in schema.fields:
        mine = full.get(f.name)
        if mine is None:
            raise ValueError(
                f"sievemq: schema column '{f.name}' is not a column of the source "
                f"(columns: {', '.join(COLUMNS)})"
            )
        if f.name in ("stream", "vhost") and not several:
            pass  # allowed: a one-stream read can still ask for its name
        if not _same_type(f.dataType, mine.dataType):
            raise ValueError(
                f"sievemq: schema column '{f.name}' must be {mine.dataType.simpleString()}, "
                f"not {f.dataType.simpleString()}"
            )


def _same_type(a: DataType, b: DataType) -> bool:
    return a.simpleString() == b.simpleString()


def arrow_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects for ``schema`` (a ``pyarrow.Schema``)."""
    return to_arrow_schema(schema, timezone="UTC", prefers_large_types=False)
