"""Prometheus: ``/metrics`` (totals) and ``/metrics/per-object`` (labelled per stream).

RabbitMQ's metric names where RabbitMQ has the fact (``rabbitmq_prometheus``: so its Grafana
dashboards work), ``sievemq_*`` for what only SieveMQ measures (filter work, write latency).
A scrape is computed on the event loop from in-memory counters and segment tables (no file
reads); like RabbitMQ's prometheus endpoint it needs no credentials.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import fields

from fastapi import APIRouter, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sievemq.admin_api.deps import Facade, Heavy
from sievemq.admin_api.rabbit.cluster_name import cluster_name
from sievemq.admin_api.shapes import EMULATED_RABBITMQ_VERSION
from sievemq.admin_api.slicing import Slicer
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import (
    ConsumerView,
    FilterStats,
    HistogramView,
    QueueView,
    StreamView,
    Totals,
)

router = APIRouter(tags=["Prometheus"])

# the Prometheus name and help of each filter counter (``FilterStats``'s fields)
_FILTER_METRICS: dict[str, tuple[str, str]] = {
    "chunks_scanned": ("sievemq_stream_chunks_scanned", "Chunk headers looked at by readers"),
    "chunks_skipped": (
        "sievemq_stream_chunks_skipped_bloom",
        "Chunks skipped by their Bloom filter without reading the body",
    ),
    "chunks_skipped_subscription": (
        "sievemq_stream_chunks_skipped_subscription",
        "Chunks skipped by a registered SQL subscription's bits",
    ),
    "chunks_false_positive": (
        "sievemq_stream_chunks_false_positive",
        "Chunks read because the Bloom filter said maybe, that held no match",
    ),
    "records_matched": ("sievemq_stream_messages_matched", "Messages that matched a filter"),
    "records_skipped": ("sievemq_stream_messages_skipped", "Messages a filter skipped"),
    "records_skipped_by_bloom": (
        "sievemq_stream_messages_skipped_bloom",
        "Messages skipped inside chunks the Bloom filter ruled out",
    ),
    "bytes_read": ("sievemq_stream_read_bytes", "Bytes read from segments by consumers"),
    "bytes_unfiltered": (
        "sievemq_stream_unfiltered_bytes",
        "Bytes consumers without a filter would have read from segments for the same chunks",
    ),
    "messages_delivered": ("sievemq_stream_messages_delivered", "Messages delivered"),
    "bytes_delivered": ("sievemq_stream_delivered_bytes", "Body bytes delivered"),
    "sql_errors": ("sievemq_stream_sql_errors", "SQL filter evaluation errors"),
}
# (metric name, FilterStats field, help), in the type's field order: a counter added to
# FilterStats without a metric here fails at import (KeyError)
FILTER_COUNTERS = tuple(
    (_FILTER_METRICS[f.name][0], f.name, _FILTER_METRICS[f.name][1]) for f in fields(FilterStats)
)


def _histogram(name: str, doc: str, h: HistogramView) -> HistogramMetricFamily:
    buckets = [("+Inf" if b == float("inf") else repr(b), n) for b, n in h.buckets]
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=h.sum)


class _Collector:
    """The families of one scrape. ``gather`` reads the broker in slices between loop turns
    (``Slicer``); ``collect`` then only formats what was gathered."""

    def __init__(self, facade: BrokerFacade, per_object: bool, slicer: Slicer) -> None:
        self.facade = facade
        self.per_object = per_object
        self.slicer = slicer
        # per object: the labelled families as text, written directly: prometheus_client's
        # writer validates and escapes every label of every sample (tens of µs each), which a
        # 1,000-stream scrape on the event loop cannot afford
        self.labelled: list[str] = []
        self.streams: list[StreamView] = []
        self.classic: list[QueueView] = []
        self.queue_families: list[Metric] = []

    async def gather(self) -> None:
        self.streams = await self.slicer.collect(self.facade.iter_streams())
        self.classic = await self.slicer.collect(self.facade.iter_queues())
        self.queue_families = await self._queues(self.streams, self.facade.list_consumers())

    def collect(self) -> Iterator[Metric]:
        f = self.facade
        streams = self.streams
        overview = f.overview(streams)
        t = overview.totals
        build = GaugeMetricFamily(
            "rabbitmq_build_info",
            "RabbitMQ & Erlang/OTP version info",
            labels=["rabbitmq_version", "prometheus_plugin_version", "product", "product_version"],
        )
        build.add_metric(
            [EMULATED_RABBITMQ_VERSION, f.version, "SieveMQ", f.version],
            1,
        )
        yield build
        identity = GaugeMetricFamily(
            "rabbitmq_identity_info",
            "RabbitMQ node & cluster identity info",
            labels=[
                "rabbitmq_node",
                "rabbitmq_cluster",
                "rabbitmq_cluster_permanent_id",
                "rabbitmq_endpoint",
            ],
        )
        endpoint = "per-object" if self.per_object else "memory-breakdown"
        cluster = cluster_name(f)  # in a cluster, the same on every node
        identity.add_metric([f.node_name, cluster, cluster, endpoint], 1)
        yield identity
        yield GaugeMetricFamily("rabbitmq_connections", "Connections currently open", t.connections)
        yield GaugeMetricFamily("rabbitmq_channels", "Channels currently open", t.channels)
        yield GaugeMetricFamily("rabbitmq_consumers", "Consumers currently connected", t.consumers)
        yield GaugeMetricFamily("rabbitmq_queues", "Queues available", t.queues)
        yield GaugeMetricFamily(
            "rabbitmq_global_consumers", "Current number of consumers", t.consumers
        )
        yield GaugeMetricFamily(
            "rabbitmq_global_publishers", "Current number of publishers", f.publishers()
        )
        yield from _global_counters(t)
        alarms = set(overview.alarms)
        yield GaugeMetricFamily(
            "rabbitmq_alarms_memory_used_watermark",
            "is 1 if VM memory watermark threshold is reached",
            1 if "memory" in alarms else 0,
        )
        yield GaugeMetricFamily(
            "rabbitmq_alarms_free_disk_space_watermark",
            "is 1 if free disk space threshold is reached",
            1 if "disk" in alarms else 0,
        )
        fds = f.descriptors()
        yield GaugeMetricFamily("rabbitmq_process_open_fds", "Open file descriptors", fds.fd_used)
        yield GaugeMetricFamily(
            "rabbitmq_process_max_fds", "Open file descriptors limit", fds.fd_total
        )
        yield from self.queue_families
        lat = f.write_latencies()
        yield _histogram(
            "sievemq_append_seconds",
            "Time to write one batch of published messages as a chunk (with fdatasync "
            "under fsync=always)",
            lat.append,
        )
        yield _histogram(
            "sievemq_fsync_seconds", "Time of one periodic fdatasync (fsync=batch)", lat.fsync
        )

    async def _queues(
        self, streams: list[StreamView], consumers: list[ConsumerView]
    ) -> list[Metric]:
        lab = ["vhost", "queue"] if self.per_object else []

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=lab)

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=lab)

        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "messages": gauge(
                "rabbitmq_queue_messages",
                "Sum of ready and unacknowledged messages - total queue depth",
            ),
            "ready": gauge(
                "rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers"
            ),
            "unacked": gauge(
                "rabbitmq_queue_messages_unacked",
                "Messages delivered to consumers but not yet acknowledged",
            ),
            "bytes": gauge(
                "rabbitmq_queue_messages_bytes",
                "Size in bytes of ready and unacknowledged messages",
            ),
            "consumers": gauge("rabbitmq_queue_consumers", "Consumers on a queue"),
            "published": counter(
                "rabbitmq_queue_messages_published", "Total number of messages published to queues"
            ),
            "segments": gauge("rabbitmq_stream_segments", "Number of segment files of a stream"),
            "lag": gauge(
                "rabbitmq_stream_consumer_max_offset_lag",
                "Highest offset lag of the stream's consumers",
            ),
            "chunks": gauge("sievemq_stream_chunks", "Chunks stored in a stream"),
            "first": gauge("sievemq_stream_first_offset", "First offset retained"),
        }
        filters = {field: counter(name, doc) for name, field, doc in FILTER_COUNTERS}
        everything = {**families, **filters}
        sample_names = {
            k: f.name + ("_total" if f.type == "counter" else "") for k, f in everything.items()
        }
        lines: dict[str, list[str]] = {k: [] for k in everything}
        totals: dict[str, float] = {}

        def add(vhost: str, queue: str, values: Mapping[str, float]) -> str:
            """One queue's samples: per object, a labelled line each (the labels are
            returned); else added to the totals (the highest lag, not the sum)."""
            if not self.per_object:
                for k, v in values.items():
                    totals[k] = max(totals.get(k, 0), v) if k == "lag" else totals.get(k, 0) + v
                return ""
            labels = f'{{vhost="{_escape(vhost)}",queue="{_escape(queue)}"}}'
            for k, v in values.items():
                lines[k].append(f"{sample_names[k]}{labels} {v}\n")
            return labels

        unacked: dict[tuple[str, str], int] = {}
        lag: dict[tuple[str, str], int] = {}
        for c in consumers:
            key = (c.vhost, c.stream)
            unacked[key] = unacked.get(key, 0) + max(0, c.prefetch_count - c.credit)
            lag[key] = max(lag.get(key, 0), c.lag or 0)
        step = self.slicer.step
        for s in streams:
            await step()
            key = (s.vhost, s.name)
            stats = vars(s.filter_stats)
            values = {
                "messages": s.messages,
                "ready": s.messages,
                "unacked": unacked.get(key, 0),
                "bytes": s.bytes,
                "consumers": s.consumers,
                "published": s.published,
                "segments": s.segments,
                "lag": lag.get(key, 0),
                "chunks": s.chunks,
                "first": s.first_offset,
            }
            for k in filters:
                values[k] = stats[k]
            add(s.vhost, s.name, values)
        classic_lines: dict[str, list[str]] = {k: [] for k, _, _ in CLASSIC_COUNTERS}
        for cv in self.classic:
            await step()
            labels = add(
                cv.vhost,
                cv.name,
                {
                    "messages": cv.messages,
                    "ready": cv.messages_ready,
                    "unacked": cv.messages_unacknowledged,
                    "bytes": cv.bytes,
                    "consumers": cv.consumers,
                    "published": cv.published,
                },
            )
            if self.per_object:
                counts = cv.message_counts()
                for k, _, _ in CLASSIC_COUNTERS:
                    classic_lines[k].append(f"sievemq_queue_{k}_total{labels} {counts[k]}\n")
        if not self.per_object:  # the totals, as prometheus_client families
            out: list[Metric] = []
            for k, fam in everything.items():
                if k != "first":
                    fam.add_metric([], totals.get(k, 0))
                    out.append(fam)
            return out
        for k, _, doc in CLASSIC_COUNTERS:
            name = f"sievemq_queue_{k}_total"
            self.labelled.append(_text_family(name, doc, "counter", classic_lines[k]))
        for k, fam in everything.items():
            self.labelled.append(
                _text_family(sample_names[k], fam.documentation, fam.type, lines[k])
            )
        name = "sievemq_named_consumer_offset_lag"
        named: list[str] = []
        for s in streams:
            await step()
            if not self.facade.stream_exists(s.vhost, s.name):
                continue
            for o in self.facade.consumer_offsets(s.vhost, s.name):
                named.append(
                    f'{name}{{vhost="{_escape(s.vhost)}",queue="{_escape(s.name)}",'
                    f'consumer="{_escape(o.consumer)}"}} {o.lag}\n'
                )
        doc = "Messages stored after a named consumer's committed offset"
        self.labelled.append(_text_family(name, doc, "gauge", named))
        return []


def _text_family(name: str, doc: str, kind: str, samples: list[str]) -> str:
    """A metric family in the text exposition format, from its sample lines."""
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n" + "".join(samples)


# per-object counters of classic and quorum queues: (message_stats name, _, help); RabbitMQ
# has these per channel and queue only (rabbitmq_channel_*), SieveMQ keeps them per queue
CLASSIC_COUNTERS = (
    ("deliver", "", "Deliveries to consumers with acknowledgements"),
    ("deliver_no_ack", "", "Deliveries to consumers without acknowledgements"),
    ("get", "", "Messages fetched with basic.get with acknowledgements"),
    ("get_no_ack", "", "Messages fetched with basic.get without acknowledgements"),
    ("get_empty", "", "basic.get answered get-empty"),
    ("ack", "", "Messages acknowledged by clients"),
    ("redeliver", "", "Messages delivered again after a requeue"),
)

# rabbitmq_global_messages_*_total by queue type: (name, message_stats key, help)
BY_QUEUE_TYPE = (
    ("delivered", "deliver_get", "Total number of messages delivered to consumers"),
    (
        "delivered_consume_manual_ack",
        "deliver",
        "Total number of messages delivered to consumers using manual acknowledgement mode",
    ),
    (
        "delivered_consume_auto_ack",
        "deliver_no_ack",
        "Total number of messages delivered to consumers using automatic acknowledgement mode",
    ),
    (
        "delivered_get_manual_ack",
        "get",
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
    ),
    (
        "delivered_get_auto_ack",
        "get_no_ack",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
    ),
    ("get_empty", "get_empty", "Total number of times basic.get operations fetched no message"),
    ("redelivered", "redeliver", "Total number of messages redelivered to consumers"),
    ("acknowledged", "ack", "Total number of message acknowledgements received from consumers"),
)
QUEUE_TYPES = {
    "classic": "rabbit_classic_queue",
    "quorum": "rabbit_quorum_queue",
    "stream": "rabbit_stream_queue",
}


def _global_counters(t: Totals) -> Iterator[Metric]:
    """RabbitMQ's ``rabbitmq_global_messages_*_total`` families: a message counts once
    however many queues it was routed to, under ``protocol="amqp091"`` (AMQP 0-9-1 and
    HTTP publishes) or ``protocol="stream"`` (the stream protocol), as RabbitMQ labels them."""
    stats = t.message_stats
    for name, doc in (
        ("received", "Total number of messages received from publishers"),
        ("routed", "Total number of messages routed to queues or streams"),
        ("confirmed", "Total number of messages confirmed to publishers"),
    ):
        counter = CounterMetricFamily(f"rabbitmq_global_messages_{name}", doc, labels=["protocol"])
        for protocol, counts in t.by_protocol.items():
            counter.add_metric([protocol], counts[name])
        yield counter
    for name, value, doc in (
        (
            "unroutable_returned",
            stats.get("return_unroutable", 0),
            "Total number of messages published as mandatory into an exchange and returned "
            "to the publisher as unroutable",
        ),
        (
            "unroutable_dropped",
            stats.get("drop_unroutable", 0),
            "Total number of messages published as non-mandatory into an exchange and dropped "
            "as unroutable",
        ),
    ):
        counter = CounterMetricFamily(f"rabbitmq_global_messages_{name}", doc, labels=["protocol"])
        counter.add_metric(["amqp091"], value)
        counter.add_metric(["stream"], 0)  # the stream protocol publishes to a stream itself
        yield counter
    for name, key, doc in BY_QUEUE_TYPE:
        counter = CounterMetricFamily(
            f"rabbitmq_global_messages_{name}", doc, labels=["protocol", "queue_type"]
        )
        for kind, label in QUEUE_TYPES.items():
            counter.add_metric(["amqp091", label], t.by_type.get(kind, {}).get(key, 0))
        yield counter


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def with_node(text: str, node: str) -> str:
    """Every sample of an exposition labelled ``node="NODE"`` (a cluster node's scrape: its
    series stay apart from the other nodes' however Prometheus labels the targets)."""
    label = f'node="{_escape(node)}"'
    out = []
    for line in text.splitlines(keepends=True):
        if not line.strip() or line.startswith("#"):
            out.append(line)
            continue
        brace, space = line.find("{"), line.find(" ")
        if brace == -1 or space < brace:  # no labels yet
            out.append(f"{line[:space]}{{{label}}}{line[space:]}")
        elif line[brace + 1] == "}":
            out.append(f"{line[: brace + 1]}{label}{line[brace + 1 :]}")
        else:
            out.append(f"{line[: brace + 1]}{label},{line[brace + 1 :]}")
    return "".join(out)


async def _scrape(f: BrokerFacade, per_object: bool, slicer: Slicer) -> Response:
    collector = _Collector(f, per_object, slicer)
    await collector.gather()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode("utf-8")
    if per_object:
        text += "".join(collector.labelled)
    if f.cluster is not None:  # per-node scraping of a cluster: every series names its node
        text = with_node(text, f.node_name)
    return Response(text.encode("utf-8"), media_type=CONTENT_TYPE_LATEST)


@router.get("/metrics", response_class=Response)
async def metrics(f: Facade, slicer: Heavy) -> Response:
    """Totals, without per-object labels (RabbitMQ's aggregated endpoint)."""
    return await _scrape(f, False, slicer)


@router.get("/metrics/per-object", response_class=Response)
async def metrics_per_object(f: Facade, slicer: Heavy) -> Response:
    """Every stream's metrics labelled ``{vhost, queue}``."""
    return await _scrape(f, True, slicer)
