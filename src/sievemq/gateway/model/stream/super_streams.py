"""Super streams: a direct exchange whose bindings name the partition streams, in order.

As RabbitMQ's stream plugin builds them: the exchange is durable, of type ``direct`` and
carries the argument ``x-super-stream = true``; each partition is a stream queue bound to it
with its binding key as routing key and ``x-stream-partition-order = i``. They are ordinary
objects of the vhost, so AMQP 0-9-1 clients and the admin API see them (and an AMQP publish
to the exchange with a binding key lands in that partition). Partitions are listed in
``x-stream-partition-order`` order; routing follows the exchange's bindings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sievemq.amqp.errors import AMQPError
from sievemq.gateway.model.stream.queue import StreamQueue

if TYPE_CHECKING:
    from sievemq.gateway.model.vhost import VirtualHost

SUPER_STREAM_ARGUMENT = "x-super-stream"
PARTITION_ORDER = "x-stream-partition-order"
MAX_NAME_BYTES = 255


class SuperStreamError(Exception):
    """A super-stream command that cannot be done; ``kind`` picks the response code."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind  # "invalid" | "exists" | "missing"


def valid_name(name: str) -> bool:
    """RabbitMQ's stream-name rule: non-empty, at most 255 bytes, not ``amq.*``."""
    return bool(name) and not name.startswith("amq.") and len(name.encode()) <= MAX_NAME_BYTES


def create(
    vhost: VirtualHost,
    name: str,
    partitions: Sequence[str],
    binding_keys: Sequence[str],
    queue_arguments: dict[str, Any],
) -> None:
    """Exchange, partition streams, bindings; everything made is undone when a step fails.

    Raises ``SuperStreamError``: ``invalid`` (bad name, no partitions, keys not one per
    partition), ``exists`` (an exchange of that name, or a queue named as a partition).
    ``AMQPError``/``OSError`` from the declares propagate after the rollback.
    """
    if not valid_name(name):
        raise SuperStreamError("invalid", f"'{name}' is not a correct name for a super stream")
    if not partitions or len(partitions) != len(binding_keys):
        raise SuperStreamError("invalid", "one binding key per partition is needed")
    if len(set(partitions)) != len(partitions):
        raise SuperStreamError("invalid", "partition names must differ")
    if name in vhost.exchanges:
        raise SuperStreamError("exists", f"there is already an exchange named '{name}'")
    for partition in partitions:
        if not valid_name(partition):
            raise SuperStreamError("invalid", f"'{partition}' is not a correct name for a queue")
        if partition in vhost.queues or partition in vhost.classic.queues:
            raise SuperStreamError("exists", f"there is already a queue named '{partition}'")
    undo: list[Callable[[], object]] = []
    try:
        vhost.declare_exchange(name, "direct", arguments={SUPER_STREAM_ARGUMENT: True})
        undo.append(lambda: vhost.delete_exchange(name))
        for partition in partitions:
            vhost.declare_queue(partition, arguments=dict(queue_arguments))
            undo.append(lambda p=partition: vhost.delete_queue(p))  # type: ignore[misc]
        for order, (partition, key) in enumerate(zip(partitions, binding_keys, strict=True)):
            vhost.bind("queue", partition, name, key, {PARTITION_ORDER: order})
    except (AMQPError, OSError, ValueError):
        for step in reversed(undo):
            step()
        raise


def _partition_bindings(vhost: VirtualHost, name: str) -> list[tuple[int, str]] | None:
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        return None
    found: list[tuple[int, str]] = []
    for binding in exchange.bindings:
        if binding.destination_kind != "queue" or binding.destination not in vhost.queues:
            continue
        order = binding.arguments.get(PARTITION_ORDER)
        found.append((int(order) if isinstance(order, int) else 1 << 62, binding.destination))
    found.sort()
    return found


def partitions(vhost: VirtualHost, name: str) -> list[str] | None:
    """The partition streams in partition order; None when there is no such exchange."""
    found = _partition_bindings(vhost, name)
    return None if found is None else [stream for _, stream in found]


def partition_index(vhost: VirtualHost, name: str, stream: str) -> int:
    """The stream's position in the super stream (single active consumer groups), or -1."""
    for order, partition in _partition_bindings(vhost, name) or ():
        if partition == stream:
            return order if order < 1 << 62 else -1
    return -1


def route(vhost: VirtualHost, name: str, routing_key: str) -> list[str] | None:
    """The streams the routing key reaches through the exchange (its bindings, as a publish
    would); None when there is no such exchange."""
    if name not in vhost.exchanges:
        return None
    try:
        queues = vhost.route(name, routing_key, lambda: None)
    except AMQPError:
        return []
    return [q.name for q in queues if isinstance(q, StreamQueue)]


def delete(vhost: VirtualHost, name: str) -> None:
    """The exchange and every partition stream bound to it; ``missing`` when no exchange."""
    found = partitions(vhost, name)
    if found is None:
        raise SuperStreamError("missing", f"super stream '{name}' does not exist")
    vhost.delete_exchange(name)
    for stream in found:
        vhost.delete_queue(stream)
