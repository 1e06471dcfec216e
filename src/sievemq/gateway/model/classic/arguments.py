"""Validation of classic and quorum queue declares, with RabbitMQ 3.10's checks and texts.

Pure functions over pamqp-decoded field tables (stream queues': ``model/stream/arguments.py``).
The reply texts were taken from RabbitMQ 3.10.8 (``bench/rabbitmq.sh`` starts one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sievemq.amqp.errors import PreconditionFailed
from sievemq.gateway.model import locator
from sievemq.gateway.model.replies import amqp_type, erlang_string, rs

QueueKind = Literal["classic", "quorum"]
CLASSIC_TYPE_NAME = "rabbit_classic_queue"
QUORUM_TYPE_NAME = "rabbit_quorum_queue"
TYPE_NAMES = {"classic": CLASSIC_TYPE_NAME, "quorum": QUORUM_TYPE_NAME}
OVERFLOWS = ("drop-head", "reject-publish", "reject-publish-dlx")
MAX_PRIORITY = 255

# arguments a queue type refuses (rabbit_*_queue capabilities: what the others accept)
_NOT_FOR = {
    "classic": (
        "x-delivery-limit",
        "x-quorum-initial-group-size",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-dead-letter-strategy",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
        "x-stream-filter-size-bytes",
    ),
    "quorum": (
        "x-max-priority",
        "x-queue-mode",
        "x-queue-version",
        "x-queue-master-locator",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
        "x-stream-filter-size-bytes",
    ),
}

GROUP_SIZE = "x-quorum-initial-group-size"  # kept with the queue, not compared on redeclare

# compared on redeclare, in RabbitMQ's order (rabbit_amqqueue:assert_args_equivalence)
EQUIVALENCE_KEYS = (
    "x-queue-type",
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-single-active-consumer",
    "x-delivery-limit",
)


@dataclass(frozen=True)
class QueueArguments:
    """The validated arguments of a classic or quorum queue; ``table`` is as declared."""

    kind: QueueKind = "classic"
    message_ttl: int | None = None
    expires: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None
    single_active_consumer: bool = False
    delivery_limit: int | None = None
    table: dict[str, Any] = field(default_factory=dict)


def _invalid(key: str, queue: str, vhost: str, reason: str) -> PreconditionFailed:
    return PreconditionFailed(f"invalid arg '{key}' for {rs('queue', queue, vhost)}: {reason}")


def _int(args: dict[str, Any], key: str, q: str, v: str, *, positive: bool = False) -> int | None:
    if key not in args:
        return None
    value = args[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(key, q, v, erlang_string(f"expected integer, got {amqp_type(value)}"))
    if value < 0:
        raise _invalid(key, q, v, f"{{value_negative,{value}}}")
    if positive and value == 0:
        raise _invalid(key, q, v, "{value_zero,0}")
    return int(value)


def _text(args: dict[str, Any], key: str, q: str, v: str) -> str | None:
    if key not in args:
        return None
    value = args[key]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise _invalid(key, q, v, f"{{unacceptable_type,{amqp_type(value)}}}")
    return value


def _plain(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def validate_declare(
    kind: QueueKind,
    queue: str,
    vhost: str,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: dict[str, Any] | None,
) -> QueueArguments:
    """Validate the arguments of a new classic/quorum queue (406 with RabbitMQ's text)."""
    args = dict(arguments or {})
    q, v = queue, vhost
    expires = _int(args, "x-expires", q, v, positive=True)
    ttl = _int(args, "x-message-ttl", q, v)
    dlx = _text(args, "x-dead-letter-exchange", q, v)
    dlrk = _text(args, "x-dead-letter-routing-key", q, v)
    max_length = _int(args, "x-max-length", q, v)
    max_bytes = _int(args, "x-max-length-bytes", q, v)
    priority = _int(args, "x-max-priority", q, v)
    if priority is not None and priority > MAX_PRIORITY:
        raise _invalid("x-max-priority", q, v, f"{{max_value_exceeded,{priority}}}")
    overflow = _text(args, "x-overflow", q, v) or "drop-head"
    if overflow not in OVERFLOWS:
        raise _invalid("x-overflow", q, v, "invalid_overflow")
    sac = False
    if "x-single-active-consumer" in args:
        raw = args["x-single-active-consumer"]
        if not isinstance(raw, bool):
            raise _invalid(
                "x-single-active-consumer", q, v, f"{{unacceptable_type,{amqp_type(raw)}}}"
            )
        sac = raw
    limit = _int(args, "x-delivery-limit", q, v)
    # a quorum queue's copies in a cluster, leader included (``cluster/placement.py``)
    _int(args, GROUP_SIZE, q, v, positive=True)
    locator.check_argument(args, q, v)
    type_name = TYPE_NAMES[kind]
    for key in _NOT_FOR[kind]:
        if key in args:
            raise PreconditionFailed(
                f"invalid arg '{key}' for {rs('queue', q, v)} of queue type {type_name}"
            )
    if kind == "quorum":
        if overflow == "reject-publish-dlx":
            raise PreconditionFailed(
                f"invalid arg 'x-overflow' with value 'reject-publish-dlx' for "
                f"{rs('queue', q, v)} of queue type {type_name}"
            )
        if queue == "":
            raise PreconditionFailed(f"Cannot declare a server-named queue for type {type_name}")
        for bad, prop in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner")):
            if bad:
                raise PreconditionFailed(f"invalid property '{prop}' for {rs('queue', q, v)}")
        if not durable:
            raise PreconditionFailed(f"invalid property 'non-durable' for {rs('queue', q, v)}")
    table = {k: _plain(args[k]) for k in (*EQUIVALENCE_KEYS, GROUP_SIZE) if k in args}
    return QueueArguments(
        kind=kind,
        message_ttl=ttl,
        expires=expires,
        max_length=max_length,
        max_length_bytes=max_bytes,
        overflow=overflow,
        dead_letter_exchange=dlx,
        dead_letter_routing_key=dlrk,
        max_priority=priority,
        single_active_consumer=sac,
        delivery_limit=limit,
        table=table,
    )


def consumer_priority(arguments: dict[str, Any], queue: str, vhost: str) -> int:
    """``x-priority`` of a basic.consume (0 when absent)."""
    if "x-priority" not in arguments:
        return 0
    value = arguments["x-priority"]
    if not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(
            "x-priority", queue, vhost, erlang_string(f"expected integer, got {amqp_type(value)}")
        )
    return int(value)
