"""The `sievemq` PySpark data source: batch and streaming readers and writers (wiring).

Where each method runs matters (PySpark's Python data source API): ``schema``/``reader``
run in Python processes on the driver, ``pushFilters`` and ``partitions`` in the planner
process (what they store on ``self`` reaches ``read``), ``read`` in executor workers. The
streaming reader's driver methods run in one long-lived process and ``read`` in a reader
created separately, so everything ``read`` needs travels in the partition or comes from the
options.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from sievemq.filtering.subscriptions import registered_slot
from sievemq.spark.arrow_read import RangeTask, ReadSettings, read_range, stat_counts
from sievemq.spark.network import NetTask, net_streams, net_tasks, offsets_at, read_net_range
from sievemq.spark.options import OptionError, ReadOptions, parse_options
from sievemq.spark.planning import (
    NO_LIMIT,
    Bounds,
    OffsetRange,
    StreamRef,
    StreamState,
    choose_start,
    end_offset,
    plan_ranges,
    resolve_streams,
    split_for_min_partitions,
    start_offset,
    stream_chunks,
    stream_state,
    timestamp_bounds,
)
from sievemq.spark.pushdown import Pushed, push
from sievemq.spark.schema import arrow_schema, check_user_schema, source_schema
from sievemq.spark.sink import (
    SieveBatchWriter,
    SieveStreamWriter,
    SinkOptions,
    check_sink_schema,
    parse_sink_options,
)
from sievemq.storage import ReadStats

try:  # 4.2+: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - pyspark is pinned >= 4.3
    raise


@dataclass
class RangePartition(InputPartition):
    """One Spark partition: a chunk-aligned offset range of one stream (a ``NetTask``: an
    offset range read over the network)."""

    task: RangeTask | NetTask

    def __init__(self, task: RangeTask | NetTask) -> None:
        super().__init__(None)
        self.task = task


class SieveDataSource(DataSource):
    """``spark.read.format("sievemq").option("stream", "orders").load(DATA_DIR)``."""

    # set on a per-session subclass by register(spark, metrics=...): a Spark accumulator
    metrics: ClassVar[Any] = None

    @classmethod
    def name(cls) -> str:
        return "sievemq"

    def _options(self, streaming: bool = False, either: bool = False) -> ReadOptions:
        return parse_options(dict(self.options), streaming=streaming, either=either)

    def schema(self) -> StructType:
        # stream options are accepted here too: schema() does not know which read it serves
        return source_schema(self._options(either=True).several)

    def reader(self, schema: StructType) -> SieveBatchReader:
        options = self._options()
        check_user_schema(schema, options.several)
        return SieveBatchReader(options, schema, type(self).metrics)

    def streamReader(self, schema: StructType) -> SieveStreamReader:
        options = self._options(streaming=True)
        check_user_schema(schema, options.several)
        return SieveStreamReader(options, schema, type(self).metrics)

    def _sink_options(self, schema: StructType) -> SinkOptions:
        options = parse_sink_options(dict(self.options))
        check_sink_schema(schema, options)
        return options

    def writer(self, schema: StructType, overwrite: bool) -> SieveBatchWriter:
        if overwrite:
            raise OptionError("mode", "a stream is append-only: use mode('append')")
        return SieveBatchWriter(self._sink_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> SieveStreamWriter:
        # overwrite = outputMode("complete"): every micro-batch publishes the whole result
        return SieveStreamWriter(self._sink_options(schema))


class _ReadsRanges:
    """The executor side shared by batch and stream readers."""

    options: ReadOptions
    settings: ReadSettings
    arrow: Any
    metrics: Any

    def _init_read(self, options: ReadOptions, schema: StructType, metrics: Any) -> None:
        self.options = options
        self.arrow = arrow_schema(schema)
        self.metrics = metrics
        self.settings = ReadSettings(
            columns=tuple(schema.names),
            filter_values=options.filter_values,
            match_unfiltered=options.match_unfiltered,
            match_all=options.match_all,
            sql=options.sql,
            fail_on_data_loss=options.fail_on_data_loss,
        )

    def _slot(self, ref: StreamRef) -> int | None:
        if self.options.sql is None or self.options.consumer_name is None or self.options.uri:
            return None
        return registered_slot(Path(ref.directory), self.options.consumer_name, self.options.sql)

    def _task(self, r: OffsetRange) -> RangePartition:
        ref = r.stream
        return RangePartition(
            RangeTask(ref.directory, ref.vhost, ref.name, r.start, r.until, self._slot(ref))
        )

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, RangePartition):
            return  # Spark replaces an empty partition list by one bare InputPartition
        metrics = self.metrics

        def report(stats: ReadStats) -> None:
            if metrics is not None:
                metrics.add(stat_counts(stats))

        task = partition.task
        if isinstance(task, NetTask):
            yield from read_net_range(task, self.settings, self.arrow, report)
        else:
            yield from read_range(task, self.settings, self.arrow, report)

    def _net_tasks(
        self, spans: list[tuple[StreamRef, int, int]], bounds: Bounds
    ) -> list[InputPartition]:
        tasks = net_tasks(self.options, spans, bounds.ts_lo, bounds.ts_hi)
        return [RangePartition(t) for t in tasks]


class SieveBatchReader(_ReadsRanges, DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType, metrics: Any) -> None:
        self._init_read(options, schema, metrics)
        self.pushed = Pushed()

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        # the read closure is pickled before partitions() runs: settle the settings here
        remaining = list(push(filters, self.pushed))
        values = self.pushed.filter_values
        if values and not self.options.filter_values:
            self.settings = replace(self.settings, filter_values=values, match_unfiltered=False)
        return iter(remaining)

    def partitions(self) -> list[InputPartition]:
        options = self.options
        pushed = self.pushed
        if pushed.filter_values is not None and not pushed.filter_values:
            return []  # filter_value = 'a' AND filter_value = 'b'
        bounds = timestamp_bounds(options).narrow(pushed.bounds)
        if options.uri:
            spans = []
            for net in net_streams(options):
                lo = choose_start(options, net.ref, net.state, net.stored, streaming=False)
                b = bounds.narrow(Bounds(lo, end_offset(options, net.ref, net.state)))
                if b.ts_lo > -NO_LIMIT or b.ts_hi < NO_LIMIT:
                    b = b.narrow(Bounds(*offsets_at(options, net.ref.name, b.ts_lo, b.ts_hi)))
                spans.append((net.ref, b.lo, b.hi))
            return self._net_tasks(spans, bounds)
        planned = []
        for ref in resolve_streams(options):
            state = stream_state(ref)
            lo = start_offset(options, ref, state, streaming=False)
            hi = end_offset(options, ref, state)
            b = bounds.narrow(Bounds(lo, hi))
            if b.lo >= b.hi:
                continue
            planned += plan_ranges(
                ref,
                stream_chunks(Path(ref.directory), min(state.end, b.hi)),
                b,
                options.max_bytes_per_partition,
                options.max_offsets_per_partition,
            )
        ranges = split_for_min_partitions(planned, options.min_partitions)
        return [self._task(r) for r in ranges]


def _offset_key(ref: StreamRef) -> tuple[str, str]:
    return ref.vhost, ref.name


class SieveStreamReader(_ReadsRanges, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over committed data; offsets ``{"<vhost>": {"<stream>": next}}``."""

    def __init__(self, options: ReadOptions, schema: StructType, metrics: Any) -> None:
        self._init_read(options, schema, metrics)
        self._target: dict[str, dict[str, int]] | None = None

    def _refs(self) -> list[StreamRef]:
        if self.options.uri:
            return [StreamRef(self.options.vhost, name, "") for name in self.options.streams]
        return resolve_streams(self.options)

    def _states(self) -> dict[StreamRef, tuple[StreamState, int | None]]:
        """Each stream's state, and consumerName's stored offset in network mode."""
        if self.options.uri:
            return {n.ref: (n.state, n.stored) for n in net_streams(self.options)}
        return {ref: (stream_state(ref), None) for ref in self._refs()}

    def initialOffset(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for ref, (state, stored) in self._states().items():
            if self.options.uri:
                first = choose_start(self.options, ref, state, stored, streaming=True)
            else:
                first = start_offset(self.options, ref, state, streaming=True)
            out.setdefault(ref.vhost, {})[ref.name] = first
        return out

    def _ends(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for ref, (state, _) in self._states().items():
            out.setdefault(ref.vhost, {})[ref.name] = state.end
        return out

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends()

    def getDefaultReadLimit(self) -> ReadLimit:
        # with both options set, Spark hands back the rows limit and latestOffset applies
        # maxBytesPerTrigger from the options as well
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, dict[str, int]], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        ends = self._target if self._target is not None else self._ends()
        begin: dict[str, dict[str, int]] = {}
        for ref in self._refs():
            new = ref.vhost not in start or ref.name not in start[ref.vhost]
            first = self._first(ref) if new else start[ref.vhost][ref.name]
            begin.setdefault(ref.vhost, {})[ref.name] = first
        if isinstance(limit, ReadMaxRows):
            out = _cap(begin, ends, limit.max_rows)
        else:
            out = {
                v: {s: max(begin[v][s], ends.get(v, {}).get(s, begin[v][s])) for s in streams}
                for v, streams in begin.items()
            }
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        if max_bytes is None:
            max_bytes = self.options.max_bytes_per_trigger
        if max_bytes is not None:
            out = _cap_bytes(self._refs(), begin, out, max_bytes)
        return out

    def _first(self, ref: StreamRef) -> int:
        if self.options.uri:
            return self._states()[ref][0].first
        return stream_state(ref).first

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> list[InputPartition]:
        options = self.options
        out: list[InputPartition] = []
        if options.uri:
            spans = []
            for ref in self._refs():
                until = end.get(ref.vhost, {}).get(ref.name)
                since = start.get(ref.vhost, {}).get(ref.name)
                if until is not None:
                    spans.append((ref, self._first(ref) if since is None else since, until))
            return self._net_tasks(spans, Bounds())
        for ref in self._refs():
            until = end.get(ref.vhost, {}).get(ref.name)
            if until is None:
                continue
            since = start.get(ref.vhost, {}).get(ref.name)
            if since is None:
                since = stream_state(ref).first
            if since >= until:
                continue
            planned = plan_ranges(
                ref,
                stream_chunks(Path(ref.directory), until),
                Bounds(since, until),
                options.max_bytes_per_partition,
                options.max_offsets_per_partition,
            )
            if not planned:  # retention removed the whole range: read() reports the loss
                out.append(self._task(OffsetRange(ref, since, until, 0, 0)))
                continue
            if planned[0][0].start > since:  # the first offsets were deleted by retention
                planned.insert(0, (OffsetRange(ref, since, planned[0][0].start, 0, 0), []))
            out += [
                self._task(r) for r in split_for_min_partitions(planned, options.min_partitions)
            ]
        return out

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Nothing to do: Spark's checkpoint is the source of truth for progress."""


def _cap(
    begin: dict[str, dict[str, int]], ends: dict[str, dict[str, int]], max_rows: int
) -> dict[str, dict[str, int]]:
    """Kafka's maxOffsetsPerTrigger: the budget split across streams by what they have."""
    avail = {
        (v, s): max(0, ends.get(v, {}).get(s, b) - b)
        for v, streams in begin.items()
        for s, b in streams.items()
    }
    total = sum(avail.values())
    out: dict[str, dict[str, int]] = {}
    for (v, s), n in avail.items():
        take = n if total <= max_rows else (n * max_rows) // total
        if total > max_rows and n and not take:
            take = 1
        out.setdefault(v, {})[s] = begin[v][s] + min(n, take)
    return out


def _cap_bytes(
    refs: list[StreamRef],
    begin: dict[str, dict[str, int]],
    ends: dict[str, dict[str, int]],
    max_bytes: int,
) -> dict[str, dict[str, int]]:
    """maxBytesPerTrigger: whole chunks (segment bytes) up to the budget, which is split across
    streams by the bytes they have; every stream with data gets at least one chunk, so a chunk
    larger than the budget still moves the query on."""
    pending: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (chunk end, size) per stream
    for ref in refs:
        lo = begin.get(ref.vhost, {}).get(ref.name)
        hi = ends.get(ref.vhost, {}).get(ref.name)
        if lo is None or hi is None or lo >= hi:
            continue
        pending[(ref.vhost, ref.name)] = [
            (min(c.end, hi), c.size) for c in stream_chunks(Path(ref.directory), hi) if c.end > lo
        ]
    total = sum(size for chunks in pending.values() for _, size in chunks)
    out = {v: dict(streams) for v, streams in ends.items()}
    for (vhost, name), chunks in pending.items():
        have = sum(size for _, size in chunks)
        share = have if total <= max_bytes else (have * max_bytes) // total
        used = 0
        end = begin[vhost][name]
        for chunk_end, size in chunks:
            if used and used + size > share:
                break
            used += size
            end = chunk_end
        out[vhost][name] = end
    return out
