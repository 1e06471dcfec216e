"""The `sievemq` sink: DataFrame rows published into a stream through the gateway.

``df.write.format("sievemq").option("uri", "amqp://user:pass@host:5672/%2F")
.option("stream", "out").mode("append").save()`` and ``writeStream.format("sievemq")...``.
Each Spark task opens its own AMQP connection (``spark/publisher.py``: large writes, thousands
of publishes waiting for their confirm at once) and publishes its partition's rows with
publisher confirms; nothing is written to files. Columns: ``body`` (binary or string,
required), ``filter_value`` (string) or ``filter_values`` (array<string>), ``routing_key``
(string), ``headers`` (map<string,string>).

Exactly once (docs/spark.md): every message carries the gateway's dedup headers
(``x-sievemq-publisher`` = ``spark:<query id>:<partition>``, ``x-sievemq-publishing-id`` =
``batch id << 32 | row index``), and the gateway stores an id of a reference at most once per
stream, durably (gateway/model/stream/dedup.py). A replayed micro-batch republishes the same
rows under the same ids: what was stored before the crash is confirmed and dropped, the rest is
stored. Rows are put in a canonical order before they are numbered, so the ids do not depend on
the order a shuffle delivered them in.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StringType,
    StructType,
)

from sievemq.spark import callback_server
from sievemq.spark.options import OptionError
from sievemq.spark.publisher import ConfirmPublisher, PublishError, encode_headers

SINK_OPTIONS = ("uri", "stream", "exchange", "queryId", "batchId")
_SPELLING = {name.lower(): name for name in SINK_OPTIONS}
# options Spark itself passes to a streaming sink
_IGNORED = {"checkpointlocation"}

PUBLISHER_HEADER = "x-sievemq-publisher"
PUBLISHING_ID_HEADER = "x-sievemq-publishing-id"
FILTER_HEADER = "x-stream-filter-value"
_RESERVED_PREFIXES = ("x-sievemq-publish", FILTER_HEADER)
MAX_ROWS_PER_BATCH = 1 << 32  # row indexes of one partition of one batch
WINDOW = 5000  # publishes waiting for their confirm at once, per task

_STRING = StringType()
COLUMN_TYPES: dict[str, tuple[DataType, ...]] = {
    "body": (BinaryType(), _STRING),
    "filter_value": (_STRING,),
    "filter_values": (ArrayType(_STRING, True), ArrayType(_STRING, False)),
    "routing_key": (_STRING,),
    "headers": (MapType(_STRING, _STRING, True), MapType(_STRING, _STRING, False)),
}
_TYPE_TEXT = {
    "body": "BINARY or STRING",
    "filter_value": "STRING",
    "filter_values": "ARRAY<STRING>",
    "routing_key": "STRING",
    "headers": "MAP<STRING,STRING>",
}


class ColumnError(ValueError):
    """The DataFrame's columns do not fit the sink (the text names the column)."""

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(f"sievemq sink: column '{column}': {problem}")
        self.column = column


@dataclass(frozen=True)
class SinkOptions:
    uri: str
    stream: str
    exchange: str = ""
    query_id: str | None = None
    batch_id: int | None = None

    @property
    def safe_uri(self) -> str:
        """The URI without its password (for messages)."""
        parts = urlsplit(self.uri)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        user = f"{parts.username}@" if parts.username else ""
        return f"{parts.scheme}://{user}{host}{port}{parts.path}"


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the sink's options; ``OptionError`` names the first bad one."""
    opts = {k.lower(): v for k, v in options.items()}
    for key in opts:
        if key == "path":
            raise OptionError("path", "the sievemq sink takes no path: use option 'stream'")
        if key not in _SPELLING and key not in _IGNORED:
            known = ", ".join(SINK_OPTIONS)
            raise OptionError(key, f"unknown option for the sievemq sink (known: {known})")
    uri = opts.get("uri")
    if not uri:
        raise OptionError("uri", "required: amqp://user:pass@host:5672/%2F")
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as error:
        raise OptionError("uri", f"not a valid URI: {error}") from None
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise OptionError("uri", "expected amqp://[user:pass@]host[:port][/vhost]")
    stream = opts.get("stream", "")
    if not stream:
        raise OptionError("stream", "required: the stream to publish into")
    if "," in stream:
        raise OptionError("stream", "one stream only")
    query_id = opts.get("queryid")
    raw_batch = opts.get("batchid")
    if (query_id is None) != (raw_batch is None):
        missing = "batchId" if raw_batch is None else "queryId"
        raise OptionError(missing, "queryId and batchId go together (foreachBatch writes)")
    batch_id = None
    if raw_batch is not None:
        try:
            batch_id = int(raw_batch)
        except ValueError:
            raise OptionError("batchId", f"expected a number, got {raw_batch!r}") from None
        if not 0 <= batch_id < 1 << 30:
            raise OptionError("batchId", f"{batch_id} is out of range 0..{(1 << 30) - 1}")
    if query_id is not None and not 0 < len(query_id) <= 200:
        raise OptionError("queryId", "1..200 characters")
    return SinkOptions(uri, stream, opts.get("exchange", ""), query_id, batch_id)


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Every column known and of an accepted type; ``body`` present."""
    names = schema.names
    for f in schema.fields:
        accepted = COLUMN_TYPES.get(f.name)
        if accepted is None:
            known = ", ".join(COLUMN_TYPES)
            raise ColumnError(f.name, f"not a sink column (accepted: {known}); select() first")
        if f.dataType not in accepted:
            raise ColumnError(
                f.name, f"expected {_TYPE_TEXT[f.name]}, got {f.dataType.simpleString()}"
            )
    if "body" not in names:
        raise ColumnError("body", "required (BINARY or STRING)")
    if "filter_value" in names and "filter_values" in names:
        raise ColumnError("filter_values", "give either filter_value or filter_values")
    if "routing_key" in names and not options.exchange:
        raise ColumnError(
            "routing_key",
            "needs option 'exchange': the default exchange routes by the stream's name",
        )


Row = tuple[bytes, str, tuple[str, ...], tuple[tuple[str, str], ...]]


def rows_of(batches: Iterable[Any], default_key: str) -> Iterator[Row]:
    """(body, routing key, filter values, headers) of each row of Arrow record batches."""
    for batch in batches:
        names = batch.schema.names
        n = batch.num_rows
        body = batch.column(names.index("body")).to_pylist()
        keys = _column(batch, names, "routing_key", n)
        one = _column(batch, names, "filter_value", n)
        many = _column(batch, names, "filter_values", n)
        headers = _column(batch, names, "headers", n)
        for i in range(n):
            b = body[i]
            if b is None:
                raise ColumnError("body", "NULL body (every message needs one)")
            raw = b.encode() if isinstance(b, str) else bytes(b)
            key = keys[i] if keys[i] is not None else default_key
            if many[i] is not None:
                values = tuple(v for v in many[i] if v)
            else:
                values = (one[i],) if one[i] else ()
            pairs = tuple(sorted((k, v) for k, v in headers[i] or () if v is not None))
            for k, _ in pairs:
                if k.startswith(_RESERVED_PREFIXES):
                    raise ColumnError(
                        "headers", f"header {k!r} is set by the sink (use filter_value(s))"
                    )
            yield raw, key, values, pairs


def _column(batch: Any, names: list[str], name: str, n: int) -> list[Any]:
    if name in names:
        return list(batch.column(names.index(name)).to_pylist())
    return [None] * n


def publish_rows(options: SinkOptions, rows: Iterable[Row], reference: str, base: int) -> int:
    """Publish ``rows`` (ids ``base``, ``base + 1``, ...) and wait for every confirm.

    One connection (``ConfirmPublisher``): the messages are encoded into large writes and up
    to ``WINDOW`` of them wait for their confirm at once."""
    if isinstance(rows, list) and not rows:
        return 0  # an empty task (a no-data micro-batch) opens no connection
    publisher: ConfirmPublisher | None = None
    try:
        publisher = ConfirmPublisher(options.uri, window=WINDOW)
        if not options.exchange:
            publisher.ensure_stream(options.stream)
        count = 0
        for index, (body, key, values, pairs) in enumerate(rows):
            if index >= MAX_ROWS_PER_BATCH:
                raise ValueError(f"sievemq sink: more than {MAX_ROWS_PER_BATCH} rows in a task")
            pid = base + index
            headers = encode_headers(
                pairs,
                FILTER_HEADER,
                values,
                (PUBLISHER_HEADER, reference, PUBLISHING_ID_HEADER, pid),
            )
            publisher.publish(options.exchange, key, headers, f"{reference}:{pid}", body)
            count += 1
        publisher.wait()
        return count
    except (PublishError, OSError) as error:
        raise RuntimeError(
            f"sievemq sink: publishing into {options.stream!r} at {options.safe_uri}: {error}; "
            "the task fails and Spark retries it"
        ) from None
    finally:
        if publisher is not None:
            publisher.close()


@dataclass
class SinkCommit(WriterCommitMessage):
    partition: int
    rows: int


def _task_partition() -> tuple[int, Any]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # pragma: no cover - write() always runs in a task
        return 0, None
    return context.partitionId(), context


class SieveBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sievemq")``: append only. Without ``queryId``/``batchId`` each write
    gets its own publisher reference, so a retried task does not publish twice when its input
    arrives in the same order; with them (from ``foreachBatch``) a write is numbered like a
    streaming micro-batch and a replayed batch publishes nothing twice."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.write_id = options.query_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        partition, _ = _task_partition()
        options = self.options
        reference = f"spark:{self.write_id}:{partition}"
        rows: Iterable[Row] = rows_of(iterator, options.stream)
        if options.batch_id is not None:
            rows = sorted(rows)
            base = options.batch_id << 32
        else:
            base = 0
        return SinkCommit(partition, publish_rows(options, rows, reference, base))


class SieveStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("sievemq")``: every micro-batch exactly once (module doc)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        partition, context = _task_partition()
        options = self.options
        query_id = context.getLocalProperty("sql.streaming.queryId") if context else None
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        if not query_id or batch is None:
            raise RuntimeError("sievemq sink: no streaming query id / batch id in this task")
        rows = sorted(rows_of(iterator, options.stream))  # canonical order: stable ids
        reference = f"spark:{query_id}:{partition}"
        return SinkCommit(partition, publish_rows(options, rows, reference, int(batch) << 32))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every task's rows are confirmed before the task succeeds."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: what was stored stays, and the replay skips it by its ids."""


def foreach_batch(uri: str, stream: str, query_key: str, **options: str) -> Any:
    """A ``foreachBatch`` function publishing each micro-batch into ``stream`` exactly once.

    For output modes the Python sink cannot take (``update``): ``query_key`` names the query
    for good (keep it across restarts, e.g. the job's name), and the batch id numbers the
    messages, so a replayed batch publishes nothing twice. ``options``: more sink options
    (``exchange``). Makes py4j's callback server, which runs it, safe with many open
    descriptors first (``callback_server``)."""
    callback_server.install()

    def publish(df: Any, batch_id: int) -> None:
        (
            df.write.format("sievemq")
            .option("uri", uri)
            .option("stream", stream)
            .option("queryId", query_key)
            .option("batchId", str(batch_id))
            .options(**options)
            .mode("append")
            .save()
        )

    return publish
