"""Reading a stream's files on the event loop, bounded: messages without consuming them, and
the filter size advice from the chunks' headers."""

from __future__ import annotations

import base64
import time
from typing import Any, Literal

from sievemq.amqp.errors import PreconditionFailed
from sievemq.filtering.sql import CompileError, compile_filter
from sievemq.filtering.view import sql_predicate
from sievemq.gateway.admin.base import AdminBase
from sievemq.gateway.admin.codec import decode_properties
from sievemq.gateway.admin.views import (
    BROWSE_MAX_LIMIT,
    BadRequest,
    BrowsedMessage,
    BrowseResult,
    FilterAdviceView,
)
from sievemq.gateway.model.stream.arguments import OffsetSpec, offset_from_text
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.session.stream.consumer import position_reader
from sievemq.storage import FilterSpec, Record
from sievemq.storage.advice import false_positive_rate, stream_filter_advice
from sievemq.streamproto.convert import to_amqp091

RABBITMQ_MAX_FILTER_BYTES = 255  # larger filters are a SieveMQ extension

# filter advice reads up to 1,000 chunk headers: computed at most once per this many seconds
# per stream and parameters (a dashboard refreshes every 5 s), the last answer meanwhile
ADVICE_CACHE_S = 30.0
ADVICE_CACHE_MAX = 256
_advice_clock = time.monotonic  # (a test's clock)

# a page of browse: at most this much payload, and a filtered scan this long
BROWSE_MAX_BYTES = 4 * 1024 * 1024
BROWSE_TIME_BUDGET_S = 0.05


class BrowseAdmin(AdminBase):
    """Browsing a stream and advising its filter size."""

    def browse(
        self,
        vhost: str,
        name: str,
        offset: int | str | None = None,
        timestamp_ms: int | None = None,
        limit: int = 20,
        filter_values: list[str] | None = None,
        match_unfiltered: bool = False,
        sql: str | None = None,
        newest_first: bool = False,
        max_bytes: int = BROWSE_MAX_BYTES,
        encoding: Literal["auto", "base64"] = "auto",
    ) -> BrowseResult:
        """Read up to ``limit`` messages without consuming, from ``offset`` (a number, or
        text read as ``x-stream-offset`` is: first, last, next, a number, an ISO 8601
        timestamp, an interval such as 30m), or the first at or after ``timestamp_ms``;
        without either: the first, or with ``newest_first`` the newest ``limit``. Bounded
        by ``max_bytes`` of payload and a time budget. A node holding a replica of the
        stream reads its copy, up to the committed offset the leader last sent it."""
        queue = self._readable(vhost, name)
        if not 1 <= limit <= BROWSE_MAX_LIMIT:
            raise BadRequest(f"limit must be between 1 and {BROWSE_MAX_LIMIT}, got {limit}")
        position: OffsetSpec | None = None
        if isinstance(offset, str):
            try:
                position = offset_from_text(offset, queue=name, vhost=vhost)
            except PreconditionFailed:
                raise BadRequest(
                    f"invalid offset '{offset}': use first, last, next, an offset, an ISO 8601 "
                    "timestamp or an interval such as 30m (what x-stream-offset takes)"
                ) from None
            offset = None
        if offset is not None and offset < 0:
            raise BadRequest(f"offset must be >= 0, got {offset}")
        predicate = None
        if sql:
            try:
                predicate = sql_predicate(compile_filter(sql))
            except CompileError as error:
                raise BadRequest(f"invalid sql: {error}") from None
        spec = None
        if filter_values:
            spec = FilterSpec(tuple(filter_values), match_unfiltered, False)
        stream = queue.stream
        end = stream.committed_offset  # a replicated stream shows what a majority holds
        reader = stream.reader()
        try:
            if position is not None:
                position_reader(reader, position)
            elif offset is not None:
                reader.seek_offset(offset)
            elif timestamp_ms is not None:
                reader.seek_timestamp(timestamp_ms)
            elif newest_first and spec is None and predicate is None:
                reader.seek_offset(max(stream.first_offset, end - limit))
            else:
                reader.seek_first()
            return _read_bounded(
                reader, end, limit, spec, predicate, max_bytes, encoding, queue.name
            )
        finally:
            reader.close()

    def holds_stream(self, vhost: str, name: str) -> bool:
        """This node holds the stream or a replica of it: a browse reads it here."""
        return self._held(vhost, name) is not None

    def held_counts(self, vhost: str, name: str) -> tuple[int, int]:
        """(the next offset, the messages held) of the stream or this node's copy."""
        stats = self._readable(vhost, name).stats()
        return stats.first_offset + stats.messages, stats.messages

    def filter_advice(
        self, vhost: str, name: str, target_fpr: float = 0.01, chunks: int = 1000
    ) -> FilterAdviceView:
        """The x-stream-filter-size-bytes that meets ``target_fpr`` for the newest chunks.

        Distinct values per chunk are estimated from the chunks' stored Bloom bits, so this
        reads headers only (up to ``chunks`` of them, on the event loop), and at most once
        per ``ADVICE_CACHE_S`` for the same stream and parameters: within that, the last
        answer is returned. 406 for a target outside (0, 1) or a non-positive chunk count.
        """
        queue = self._queue(vhost, name)
        if not 0.0 < target_fpr < 1.0:
            raise PreconditionFailed(f"target_fpr must be between 0 and 1, got {target_fpr}")
        if chunks < 1:
            raise PreconditionFailed(f"chunks must be at least 1, got {chunks}")
        key = (vhost, name, target_fpr, chunks)
        now = _advice_clock()
        cached = self._advice.get(key)
        if cached is not None and cached[1] is queue and now - cached[0] < ADVICE_CACHE_S:
            return cached[2]  # a dashboard polling it every few seconds reads headers once
        view = self._filter_advice(queue, target_fpr, chunks)
        if len(self._advice) >= ADVICE_CACHE_MAX:
            self._advice.clear()
        self._advice[key] = (now, queue, view)
        return view

    def _filter_advice(
        self, queue: StreamQueue, target_fpr: float, chunks: int
    ) -> FilterAdviceView:
        stream = queue.stream
        advice = stream_filter_advice(stream.directory, target_fpr, chunks, stream.end_offset)
        current = stream.config.filter_size_bytes
        return FilterAdviceView(
            vhost=queue.vhost,
            name=queue.name,
            target_false_positive_rate=target_fpr,
            recommended_filter_size_bytes=advice.size_bytes,
            expected_false_positive_rate=advice.expected_false_positive_rate,
            reachable=advice.reachable,
            distinct_values_per_chunk_p95=advice.distinct_values_per_chunk,
            chunks_sampled=advice.chunks_sampled,
            current_filter_size_bytes=current,
            current_false_positive_rate=false_positive_rate(
                current, advice.distinct_values_per_chunk
            ),
            rabbitmq_compatible=advice.size_bytes <= RABBITMQ_MAX_FILTER_BYTES,
        )


def _read_bounded(
    reader: Any,
    end: int,
    limit: int,
    spec: FilterSpec | None,
    predicate: Any,
    max_bytes: int,
    encoding: str,
    stream_name: str = "",
) -> BrowseResult:
    # Only a filtered scan is cut by time: it may read many chunks to find few matches. An
    # unfiltered page is bounded by ``limit`` and ``max_bytes`` alone, so a slow machine
    # still answers the whole page (a dashboard's "newest 20" needs two reads of 16 chunks).
    # Even a filtered scan reads once, so a stalled loop never answers an empty page.
    filtering = spec is not None or predicate is not None
    reads = 0
    deadline = time.monotonic() + BROWSE_TIME_BUDGET_S
    out: list[BrowsedMessage] = []
    used = 0
    stopped: Literal["end", "limit", "bytes", "time"] = "end"
    while True:
        if reader.position >= end:
            stopped = "end"
            break
        if len(out) >= limit:
            stopped = "limit"
            break
        if filtering and reads and time.monotonic() > deadline:
            stopped = "time"
            break
        records: list[Record] = reader.read(limit - len(out), spec, predicate, max_chunks=16)
        reads += 1
        records = [r for r in records if r.offset < end]
        for record in records:
            if out and used + len(record.body) > max_bytes:
                stopped = "bytes"
                break
            used += len(record.body)
            out.append(_browsed(record, encoding, stream_name))
        else:
            if not records and reader.at_end:
                stopped = "end"
                break
            continue
        break
    next_offset = out[-1].offset + 1 if stopped in ("bytes", "limit") and out else reader.position
    if stopped == "end":
        next_offset = max(next_offset, min(reader.position, end))
    return BrowseResult(out, next_offset, end, stopped == "end", stopped)


def _browsed(record: Record, encoding: str, stream_name: str = "") -> BrowsedMessage:
    payload: str
    kind: Literal["string", "base64"]
    if record.kind:  # a stream-protocol payload: shown as a 0-9-1 consumer would get it
        exchange, routing_key, props, body = to_amqp091(
            record.body, stream_name, record.filter_values
        )
        record = record._replace(
            exchange=exchange, routing_key=routing_key, properties=props, body=body
        )
    if encoding == "auto":
        try:
            payload, kind = record.body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            payload, kind = base64.b64encode(record.body).decode("ascii"), "base64"
    else:
        payload, kind = base64.b64encode(record.body).decode("ascii"), "base64"
    return BrowsedMessage(
        offset=record.offset,
        timestamp_ms=record.timestamp_ms,
        exchange=record.exchange,
        routing_key=record.routing_key,
        filter_values=list(record.filter_values),
        properties=decode_properties(record.properties),
        payload=payload,
        payload_encoding=kind,
        payload_bytes=len(record.body),
    )
