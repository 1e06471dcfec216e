"""Read views and commands over the broker model, for the admin API.

The admin API imports only this module; it returns plain dicts (JSON-ready) and raises the
same ``amqp.errors`` classes as the AMQP side (404 NotFound, 406 PreconditionFailed, ...),
which the API maps to HTTP statuses.
"""

from __future__ import annotations

import time
from typing import Any

from sievemq.amqp.errors import AMQPError, NotFound, PreconditionFailed
from sievemq.filtering.subscriptions import registry
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.exchanges import Exchange
from sievemq.gateway.model.queue import ConsumerInfo, StreamQueue
from sievemq.gateway.model.routing import Binding
from sievemq.gateway.runtime.alarms import ResourceAlarms, total_memory
from sievemq.storage.advice import false_positive_rate, stream_filter_advice
from sievemq.units import parse_memory_watermark, parse_size

RABBITMQ_MAX_FILTER_BYTES = 255  # larger filters are a SieveMQ extension

__all__ = ["AMQPError", "BrokerFacade"]


class BrokerFacade:
    """What the admin plane may see and do."""

    def __init__(
        self, broker: Broker, version: str = "0.1.0", alarms: ResourceAlarms | None = None
    ) -> None:
        self.broker = broker
        self.version = version
        self.started = time.time()
        self.alarms = alarms

    # ------------------------------------------------------------------ views

    def overview(self) -> dict[str, Any]:
        queues = list(self.broker.queues())
        return {
            "version": self.version,
            "uptime_s": round(time.time() - self.started, 3),
            "vhosts": len(self.broker.vhosts),
            "streams": len(queues),
            "exchanges": sum(len(v.exchanges) for v in self.broker.vhosts.values()),
            "consumers": sum(q.consumer_count for q in queues),
            "messages": sum(q.message_count for q in queues),
            "alarms": self.alarms.snapshot() if self.alarms is not None else {"active": []},
        }

    def list_streams(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return [
            self._stream_view(q) for q in self.broker.queues() if vhost is None or q.vhost == vhost
        ]

    def get_stream(self, vhost: str, name: str) -> dict[str, Any]:
        return self._stream_view(self.broker.vhost(vhost).get_queue(name))

    def list_consumers(
        self, vhost: str | None = None, stream: str | None = None
    ) -> list[dict[str, Any]]:
        """Live consumers with their filter and filter statistics (SPEC §9)."""
        if stream is not None:
            queues = [self.broker.vhost(vhost or "/").get_queue(stream)]
        else:
            queues = [q for q in self.broker.queues() if vhost is None or q.vhost == vhost]
        views = [_consumer_view(q, c) for q in queues for c in list(q.consumers)]
        return sorted(views, key=lambda v: (v["vhost"], v["stream"], v["consumer_tag"]))

    def filter_advice(
        self, vhost: str, name: str, target_fpr: float = 0.01, chunks: int = 1000
    ) -> dict[str, Any]:
        """The x-stream-filter-size-bytes that meets ``target_fpr`` for the newest chunks.

        Distinct values per chunk are estimated from the chunks' stored Bloom bits, so this
        reads headers only. 406 for a target outside (0, 1) or a non-positive chunk count.
        """
        queue = self.broker.vhost(vhost).get_queue(name)
        if not 0.0 < target_fpr < 1.0:
            raise PreconditionFailed(f"target_fpr must be between 0 and 1, got {target_fpr}")
        if chunks < 1:
            raise PreconditionFailed(f"chunks must be at least 1, got {chunks}")
        stream = queue.stream
        advice = stream_filter_advice(stream.directory, target_fpr, chunks, stream.end_offset)
        current = stream.config.filter_size_bytes
        return {
            "vhost": queue.vhost,
            "name": queue.name,
            "target_false_positive_rate": target_fpr,
            "recommended_filter_size_bytes": advice.size_bytes,
            "expected_false_positive_rate": advice.expected_false_positive_rate,
            "reachable": advice.reachable,
            "distinct_values_per_chunk_p95": advice.distinct_values_per_chunk,
            "chunks_sampled": advice.chunks_sampled,
            "current_filter_size_bytes": current,
            "current_false_positive_rate": false_positive_rate(
                current, advice.distinct_values_per_chunk
            ),
            "rabbitmq_compatible": advice.size_bytes <= RABBITMQ_MAX_FILTER_BYTES,
        }

    def list_exchanges(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return [_exchange_view(x) for v in self._vhosts(vhost) for x in v.exchanges.values()]

    def list_bindings(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return [_binding_view(v.name, b) for v in self._vhosts(vhost) for b in v.bindings()]

    def list_vhosts(self) -> list[dict[str, Any]]:
        return [
            {"name": v.name, "streams": len(v.queues), "exchanges": len(v.exchanges)}
            for v in self.broker.vhosts.values()
        ]

    def list_users(self) -> list[dict[str, Any]]:
        return [
            {"name": u.name, "tags": list(u.tags), "vhosts": sorted(u.vhosts)}
            for u in self.broker.users
        ]

    # ------------------------------------------------------------------ commands

    def create_stream(
        self, vhost: str, name: str, arguments: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Declare (or idempotently redeclare) a stream with the AMQP rules and texts."""
        args = dict(arguments or {})
        args.setdefault("x-queue-type", "stream")
        queue, _, _ = self.broker.vhost(vhost).declare_queue(name, arguments=args)
        return self._stream_view(queue)

    def delete_stream(self, vhost: str, name: str) -> int:
        v = self.broker.vhost(vhost)
        v.get_queue(name)  # 404 when missing
        return v.delete_queue(name)

    def declare_exchange(self, vhost: str, name: str, type: str, **flags: Any) -> dict[str, Any]:
        return _exchange_view(self.broker.vhost(vhost).declare_exchange(name, type, **flags))

    def delete_exchange(self, vhost: str, name: str, if_unused: bool = False) -> None:
        v = self.broker.vhost(vhost)
        v.get_exchange(name)
        v.delete_exchange(name, if_unused)

    def bind(
        self,
        vhost: str,
        source: str,
        destination_type: str,
        destination: str,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> None:
        v = self.broker.vhost(vhost)
        if destination_type == "queue":
            v.bind_queue(destination, source, routing_key, arguments)
        elif destination_type == "exchange":
            v.bind_exchange(destination, source, routing_key, arguments)
        else:
            raise PreconditionFailed(f"unknown destination type '{destination_type}'")

    def add_vhost(self, name: str) -> None:
        self.broker.add_vhost(name)

    def delete_vhost(self, name: str) -> None:
        self.broker.delete_vhost(name)

    def put_user(self, name: str, password: str, tags: tuple[str, ...] = ()) -> None:
        existing = self.broker.users.get(name)
        vhosts = existing.vhosts if existing else set()
        self.broker.users.add(name, password, tags=tags, vhosts=set(vhosts))
        self.broker.save_definitions()

    def delete_user(self, name: str) -> None:
        if not self.broker.users.delete(name):
            raise NotFound(f"no user '{name}'")
        self.broker.save_definitions()

    def set_permission(self, user: str, vhost: str) -> None:
        if user not in self.broker.users:
            raise NotFound(f"no user '{user}'")
        self.broker.vhost(vhost)
        self.broker.users.set_permission(user, vhost)
        self.broker.save_definitions()

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

    # ------------------------------------------------------------------ named consumers

    def list_consumer_offsets(self, vhost: str, stream: str) -> dict[str, int]:
        """Committed offsets of the stream's named consumers (last offset each is done with)."""
        return self.broker.vhost(vhost).get_queue(stream).stream.offsets.items()

    def get_consumer_offset(self, vhost: str, stream: str, consumer: str) -> int:
        offset = self.broker.vhost(vhost).get_queue(stream).stream.offsets.get(consumer)
        if offset is None:
            raise NotFound(f"no offset for consumer '{consumer}' on stream '{stream}'")
        return offset

    def set_consumer_offset(self, vhost: str, stream: str, consumer: str, offset: int) -> None:
        """Store a committed offset: the consumer resumes at ``offset + 1`` on its next
        consume (a live consumer of that name overwrites it with its own commits)."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise PreconditionFailed(f"offset must be an integer >= 0, got {offset!r}")
        self.broker.vhost(vhost).get_queue(stream).stream.offsets.set(consumer, offset)

    def delete_consumer_offset(self, vhost: str, stream: str, consumer: str) -> None:
        """Forget the consumer: its offset and its registered SQL subscription."""
        queue = self.broker.vhost(vhost).get_queue(stream)
        if queue.stream.offsets.get(consumer) is None:
            raise NotFound(f"no offset for consumer '{consumer}' on stream '{stream}'")
        queue.stream.offsets.delete(consumer)
        registry(queue.stream).forget(consumer)

    def list_subscriptions(self, vhost: str, stream: str) -> list[dict[str, Any]]:
        """The stream's registered SQL subscriptions, with the slot their chunk bit uses."""
        queue = self.broker.vhost(vhost).get_queue(stream)
        return [
            {"slot": i, "consumer": s.name, "expression": s.expression, "active": s.active}
            for i, s in enumerate(registry(queue.stream).slots)
        ]

    # ------------------------------------------------------------------ helpers

    def _vhosts(self, vhost: str | None) -> list[Any]:
        if vhost is None:
            return list(self.broker.vhosts.values())
        return [self.broker.vhost(vhost)]

    @staticmethod
    def _stream_view(queue: StreamQueue) -> dict[str, Any]:
        stats = queue.stream.stats()
        return {
            "vhost": queue.vhost,
            "name": queue.name,
            "arguments": dict(queue.arguments.table),
            "messages": stats.messages,
            "bytes": stats.bytes,
            "segments": stats.segments,
            "chunks": stats.chunks,
            "first_offset": stats.first_offset,
            "last_offset": stats.last_offset,
            "first_timestamp_ms": stats.first_timestamp_ms,
            "last_timestamp_ms": stats.last_timestamp_ms,
            "consumers": queue.consumer_count,
            "filter_stats": queue.filter_stats.as_dict(),
        }


def _consumer_view(queue: StreamQueue, consumer: ConsumerInfo) -> dict[str, Any]:
    spec = consumer.spec
    return {
        "vhost": queue.vhost,
        "stream": queue.name,
        "consumer_tag": consumer.tag,
        "connection": consumer.connection_id,
        "channel": consumer.channel_id,
        "prefetch": consumer.prefetch,
        "credit": consumer.credit,
        "filter": None
        if spec is None
        else {
            "values": list(spec.values),
            "match_unfiltered": spec.match_unfiltered,
            "match_type": "all" if spec.match_all else "any",
        },
        "filter_stats": consumer.filter_stats(),
    }


def _exchange_view(x: Exchange) -> dict[str, Any]:
    return {
        "vhost": x.vhost,
        "name": x.name,
        "type": x.type,
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": dict(x.arguments),
    }


def _binding_view(vhost: str, b: Binding) -> dict[str, Any]:
    return {
        "vhost": vhost,
        "source": b.source,
        "destination_type": b.destination_kind,
        "destination": b.destination,
        "routing_key": b.routing_key,
        "arguments": dict(b.arguments),
    }
