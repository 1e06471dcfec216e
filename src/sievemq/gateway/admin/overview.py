"""The node's overview: totals over every queue and connection, alarms, write latencies."""

from __future__ import annotations

import time
from typing import Any

from sievemq.amqp.errors import PreconditionFailed
from sievemq.gateway.admin.base import (
    LENGTHS,
    NODE_COUNTS,
    PRODUCT,
    classic_counts_keys,
    split_counts,
)
from sievemq.gateway.admin.queues import QueuesAdmin
from sievemq.gateway.admin.views import (
    DescriptorsView,
    HistogramView,
    OverviewView,
    StreamView,
    Totals,
    WriteLatencyView,
)
from sievemq.gateway.model.classic.queue import message_stats as classic_message_stats
from sievemq.gateway.runtime import descriptors
from sievemq.gateway.runtime.alarms import total_memory
from sievemq.storage import FilterStats
from sievemq.units import parse_memory_watermark, parse_size


class OverviewAdmin(QueuesAdmin):
    """The overview, write latencies and the alarm limits."""

    def overview(self, streams: list[StreamView] | None = None) -> OverviewView:
        """Totals over every stream (``streams``: the views of all of them, when the caller
        already has them)."""
        now = time.time()
        queues = list(self.broker.queues())
        subscribed = self._stream_subscribers()
        views = (
            streams
            if streams is not None
            else [self._stream_view(q, now, subscribed) for q in queues]
        )
        connections = self._connections()
        totals = Totals(
            connections=len(connections),
            channels=sum(len(c.channels) for c in connections),
            consumers=sum(q.consumer_count for q in queues) + sum(subscribed.values()),
            exchanges=sum(len(v.exchanges) for v in self.broker.vhosts.values()),
            queues=len(queues),
            vhosts=len(self.broker.vhosts),
            users=len(list(self.broker.users)),
            messages=sum(v.messages for v in views),
            bytes=sum(v.bytes for v in views),
            published=sum(v.published for v in views),
            publish_rate=round(sum(v.publish_rate for v in views), 1),
            delivered=sum(v.delivered for v in views),
            deliver_rate=round(sum(v.deliver_rate for v in views), 1),
        )
        by_type = self._counts_by_type(views)
        stats = {k: sum(t[k] for t in by_type.values()) for k in classic_counts_keys()}
        counters = self.broker.counters
        unroutable = counters.returned_unroutable + counters.dropped_unroutable
        # messages published, once each however many queues took a copy (RabbitMQ's
        # overview counts them at the channel), over both protocols
        stats["publish"] = counters.received + counters.stream_received
        stats["confirm"] = counters.confirmed
        stats["return_unroutable"] = counters.returned_unroutable
        stats["drop_unroutable"] = counters.dropped_unroutable
        totals.by_protocol = {
            "amqp091": {
                "received": counters.received,
                "routed": counters.received - unroutable,
                "confirmed": counters.confirmed,
            },
            "stream": {
                "received": counters.stream_received,
                "routed": counters.stream_routed,
                "confirmed": counters.stream_confirmed,
            },
        }
        totals.message_stats = stats
        totals.by_type = by_type
        totals.published = stats["publish"]
        totals.delivered = stats["deliver_get"]
        for vh in self.broker.vhosts.values():
            totals.queues += len(vh.classic.queues)
            for cq in vh.classic.queues.values():
                totals.consumers += cq.consumer_count
                totals.messages += cq.message_count + cq.outstanding
                totals.messages_unacknowledged += cq.outstanding
                totals.bytes += cq.ready_bytes
        totals.messages_unacknowledged += sum(v.messages_unacknowledged for v in views)
        node_counts = {k: stats[k] for k in NODE_COUNTS}
        rates = {
            **self._summed_rates,
            **self._rates.rates(("o",), *split_counts(node_counts), now, len(node_counts)),
        }
        totals.message_rates = {k: rates.get(k, 0.0) for k in stats}
        totals.length_rates = {k: rates.get(k, 0.0) for k in LENGTHS}
        totals.publish_rate = totals.message_rates["publish"]
        totals.deliver_rate = totals.message_rates["deliver_get"]
        summed = FilterStats()
        for q in queues:
            summed.add(q.filter_stats)
        return OverviewView(
            product_name=PRODUCT,
            product_version=self.version,
            node=self.node_name,
            uptime_ms=int((now - self.started) * 1000),
            listeners=list(self.listeners),
            totals=totals,
            alarms=self.active_alarms(),
            filter_stats=summed,
        )

    def _counts_by_type(self, streams: list[StreamView]) -> dict[str, dict[str, int]]:
        """message_stats counters summed per queue type; a stream's deliveries are
        consumer deliveries with acks (streams have no basic.get)."""
        zero = dict.fromkeys(classic_counts_keys(), 0)
        out = {"classic": dict(zero), "quorum": dict(zero), "stream": dict(zero)}
        for v in self.broker.vhosts.values():
            for q in v.classic.queues.values():
                sums = out["quorum" if q.kind == "quorum" else "classic"]
                for k, n in classic_message_stats(q).items():
                    sums[k] += n
        st = out["stream"]
        for sv in streams:
            st["publish"] += sv.published
            st["deliver"] += sv.delivered
            st["deliver_get"] += sv.delivered
            st["ack"] += sv.acked
        for kind, counts in self.broker.counters.retired.items():  # deleted queues' counts
            for k, n in counts.items():
                out[kind][k] += n
        for reads in self.broker.counters.replica_reads().values():  # its copies' readers
            for k, n in reads.items():
                st[k] += n
        return out

    def replica_reads(self) -> dict[tuple[str, str], dict[str, int]]:
        """Deliveries and acks of this node's consumers of each replica it holds (``deliver``,
        ``deliver_get``, ``ack``) and how many read it now (``consumers``: AMQP consumers
        and Stream-protocol subscriptions), by (vhost, stream)."""
        reads = self.broker.counters.replica_reads()
        directory = self.broker.directory
        if directory is not None:
            subscribed = self._stream_subscribers()
            for q in directory.replica_queues():
                readers = q.consumer_count + subscribed.get(id(q), 0)
                reads.setdefault((q.vhost, q.name), {})["consumers"] = readers
        return reads

    def write_latencies(self) -> WriteLatencyView:
        """Append-batch and fdatasync latency histograms of every stream of this node."""
        if self.node is None:
            empty = HistogramView([(float("inf"), 0)], 0.0, 0)
            return WriteLatencyView(empty, empty)
        lat = self.node.latencies
        return WriteLatencyView(
            HistogramView(lat.append.cumulative(), lat.append.sum, lat.append.count),
            HistogramView(lat.fsync.cumulative(), lat.fsync.sum, lat.fsync.count),
        )

    def descriptors(self) -> DescriptorsView:
        """Open descriptors against the limit, and client sockets against their share."""
        node = self.node
        return DescriptorsView(
            descriptors.open_descriptors(),
            descriptors.soft_limit(),
            node.connection_count if node is not None else 0,
            node.limits.max_connections if node is not None else 0,
        )

    def set_alarm_limits(
        self,
        memory_high_watermark: str | float | None = None,
        disk_free_limit: str | int | None = None,
    ) -> dict[str, Any]:
        """Change the alarm limits at runtime (``rabbitmqctl set_vm_memory_high_watermark`` /
        ``set_disk_free_limit``); the alarms are re-checked at once. 406 for a bad value."""
        if self.alarms is None:
            raise PreconditionFailed("resource alarms are not running")
        try:
            memory = (
                None
                if memory_high_watermark is None
                else parse_memory_watermark(memory_high_watermark).limit(total_memory())
            )
            disk = None if disk_free_limit is None else parse_size(disk_free_limit)
        except ValueError as error:
            raise PreconditionFailed(str(error)) from None
        self.alarms.set_limits(memory_limit=memory, disk_free_limit=disk)
        return self.alarms.snapshot()
