"""Validation of queue and consumer arguments, with RabbitMQ's checks, order and reply texts.

Pure functions over pamqp-decoded field tables. RabbitMQ is the reference (the checks and
texts matched are in docs/compatibility.md, "Stream queues" and "Consuming"); where SieveMQ
goes further (filter sizes up to 4096, compression, several filter values, named consumers,
SQL filters) the texts follow the same ``invalid arg '<key>' for queue 'q' in vhost '/':
<reason>`` shape.

``parse_filter_values`` runs on the publish hot path: the common case (one ``str``) is a
few comparisons.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from sievemq.amqp.errors import NotImplemented_, PreconditionFailed, ResourceLocked
from sievemq.gateway.model import locator as leader_locator
from sievemq.gateway.model.replies import (
    amqp_type,
    display_value,
    erlang_string,
    erlang_value,
    rs,
    type_class,
)
from sievemq.storage import FilterSpec

STREAM_TYPE_NAME = "rabbit_stream_queue"  # how RabbitMQ names the type in "of queue type ..."
DEFAULT_QUEUE_TYPE = "stream"  # the x-queue-type a stream's table records when none was given
DEFAULT_MAX_SEGMENT_SIZE_BYTES = 500_000_000
MAX_STREAM_MAX_SEGMENT_SIZE = 3_000_000_000
DEFAULT_FILTER_SIZE_BYTES = 16
MIN_FILTER_SIZE_BYTES = 16
MAX_FILTER_SIZE_BYTES = 4096  # RabbitMQ caps at 255; SieveMQ-only streams may go to 4096
COMPRESSIONS = ("none", "zstd")
LEADER_LOCATORS = leader_locator.ACCEPTED
MAX_FILTER_VALUE_BYTES = 4096
MAX_FILTER_VALUES = 64
MAX_CONSUMER_NAME_BYTES = 255

# Queue types RabbitMQ knows that this (stream) validator refuses: classic_arguments.py takes them.
KNOWN_OTHER_TYPES = ("classic", "quorum", "rabbit_classic_queue", "rabbit_quorum_queue")
STREAM_TYPE_ALIASES = ("stream", STREAM_TYPE_NAME)

# The stream's own arguments, in the order RabbitMQ compares them on redeclare
# (rabbit_stream_queue capabilities), plus SieveMQ's compression.
EQUIVALENCE_KEYS = (
    "x-max-length-bytes",
    "x-queue-type",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-queue-leader-locator",
    "x-stream-filter-size-bytes",
    "x-stream-compression",
)

# Arguments other queue types accept and streams reject (amqq:check_arguments_key).
REJECTED_QUEUE_ARGS = (
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-priority",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-single-active-consumer",
    "x-queue-mode",
    "x-queue-version",
    "x-queue-master-locator",
    "x-delivery-limit",
    "x-quorum-initial-group-size",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
)

_UNIT_MS = {
    "Y": 365 * 24 * 3600 * 1000,
    "M": 30 * 24 * 3600 * 1000,
    "D": 24 * 3600 * 1000,
    "h": 3600 * 1000,
    "m": 60 * 1000,
    "s": 1000,
}
_DURATION = re.compile(r"([0-9]+)([YMDhms])")


@dataclass(frozen=True)
class StreamArguments:
    """The validated arguments of a stream queue.

    ``table`` holds the stream's own arguments as declared (with ``x-queue-type`` filled in),
    which is what redeclares are compared against and what is persisted.
    """

    max_length_bytes: int | None = None
    max_age_ms: int | None = None
    max_segment_size_bytes: int = DEFAULT_MAX_SEGMENT_SIZE_BYTES
    filter_size_bytes: int = DEFAULT_FILTER_SIZE_BYTES
    compression: str = "none"
    initial_cluster_size: int | None = None
    leader_locator: str = "client-local"
    table: dict[str, Any] = field(default_factory=lambda: {"x-queue-type": "stream"})


OffsetKind = Literal["first", "last", "next", "offset", "timestamp"]


@dataclass(frozen=True)
class OffsetSpec:
    """Where a consumer starts: ``value`` is the offset or the timestamp in ms."""

    kind: OffsetKind
    value: int = 0


NEXT = OffsetSpec("next")


@dataclass(frozen=True)
class ConsumerOptions:
    """Validated basic.consume arguments of a stream consumer.

    ``offset_given`` tells a named consumer whether to resume from its stored offset.
    ``values``/``match_unfiltered``/``match_all`` are the fields of ``storage.FilterSpec``.
    """

    offset: OffsetSpec = NEXT
    offset_given: bool = False
    values: tuple[str, ...] = ()
    match_unfiltered: bool = False
    match_all: bool = False
    consumer_name: str | None = None
    sql: str | None = None

    @property
    def has_value_filter(self) -> bool:
        return bool(self.values)

    def filter_spec(self) -> FilterSpec | None:
        """The storage FilterSpec of the value filter, or None when there is none."""
        if not self.values:
            return None
        return FilterSpec(self.values, self.match_unfiltered, self.match_all)


# --------------------------------------------------------------------------- declare


def _invalid_arg(key: str, queue: str, vhost: str, reason: str) -> PreconditionFailed:
    return PreconditionFailed(f"invalid arg '{key}' for {rs('queue', queue, vhost)}: {reason}")


def _unacceptable(value: Any) -> str:
    return f"{{unacceptable_type,{amqp_type(value)}}}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_text(value: Any) -> str | None:
    """A longstr value as text (pamqp gives bytes when it is not UTF-8), else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return None


def _text_arg(key: str, value: Any, queue: str, vhost: str) -> str:
    """A text-valued argument as text; any other type is refused naming the argument."""
    text = _as_text(value)
    if text is None:
        raise _invalid_arg(key, queue, vhost, _unacceptable(value))
    return text


def _non_neg_int(key: str, value: Any, queue: str, vhost: str) -> int:
    if not _is_int(value):
        raise _invalid_arg(key, queue, vhost, _unacceptable(value))
    if value < 0:
        raise _invalid_arg(key, queue, vhost, f"{{value_negative,{value}}}")
    return int(value)


def duration_ms(text: str) -> int | None:
    """``7D``, ``12h``, ``30m``: RabbitMQ's max-age syntax in ms, or None when malformed."""
    match = _DURATION.fullmatch(text)
    if match is None:
        return None
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def _queue_type(arguments: dict[str, Any], queue: str, vhost: str) -> None:
    if "x-queue-type" not in arguments:
        return
    text = _text_arg("x-queue-type", arguments["x-queue-type"], queue, vhost)
    if text in STREAM_TYPE_ALIASES:
        return
    if text in KNOWN_OTHER_TYPES:
        raise PreconditionFailed(
            f"queue type '{text}' is not supported by this gateway; declare x-queue-type=stream"
        )
    raise _invalid_arg(
        "x-queue-type", queue, vhost, erlang_string(f"unsupported queue type '{text}'")
    )


def validate_stream_declare(
    queue_name: str,
    vhost: str,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: dict[str, Any] | None,
) -> StreamArguments:
    """Validate a queue.declare of a new stream queue; raise RabbitMQ's 406 on the first error.

    Order as RabbitMQ 4.x: queue type, argument types and values, arguments of other queue
    types, server-named, then the flags (auto-delete, exclusive, non-durable), then the
    segment and filter sizes.
    """
    args = dict(arguments or {})
    q, v = queue_name, vhost
    durable = durable and not exclusive  # rabbit_channel does this before anything else
    _queue_type(args, q, v)

    max_length_bytes = None
    if "x-max-length-bytes" in args:
        max_length_bytes = _non_neg_int("x-max-length-bytes", args["x-max-length-bytes"], q, v)
    max_age_ms = None
    if "x-max-age" in args:
        raw = args["x-max-age"]
        if not isinstance(raw, str | bytes):
            raise _invalid_arg("x-max-age", q, v, _unacceptable(raw))
        max_age_ms = duration_ms(_as_text(raw) or "")
        if not max_age_ms:  # malformed or zero
            raise _invalid_arg("x-max-age", q, v, "invalid_max_age")
    segment = DEFAULT_MAX_SEGMENT_SIZE_BYTES
    if "x-stream-max-segment-size-bytes" in args:
        key = "x-stream-max-segment-size-bytes"
        segment = _non_neg_int(key, args[key], q, v)
    filter_size = DEFAULT_FILTER_SIZE_BYTES
    if "x-stream-filter-size-bytes" in args:
        key = "x-stream-filter-size-bytes"
        filter_size = _non_neg_int(key, args[key], q, v)
    cluster_size = None
    if "x-initial-cluster-size" in args:
        cluster_size = _non_neg_int("x-initial-cluster-size", args["x-initial-cluster-size"], q, v)
        if cluster_size == 0:
            raise _invalid_arg("x-initial-cluster-size", q, v, "{value_zero,0}")
    if "x-queue-leader-locator" in args:
        _text_arg("x-queue-leader-locator", args["x-queue-leader-locator"], q, v)
    locator = leader_locator.check_argument(args, q, v) or leader_locator.CLIENT_LOCAL
    compression = "none"
    if "x-stream-compression" in args:
        text = _text_arg("x-stream-compression", args["x-stream-compression"], q, v)
        if text not in COMPRESSIONS:
            reason = erlang_string(f"unsupported compression '{text}'; use 'none' or 'zstd'")
            raise _invalid_arg("x-stream-compression", q, v, reason)
        compression = text

    for key in REJECTED_QUEUE_ARGS:
        if key in args:
            raise PreconditionFailed(
                f"invalid arg '{key}' for {rs('queue', q, v)} of queue type {STREAM_TYPE_NAME}"
            )
    if queue_name == "":
        raise PreconditionFailed(f"Cannot declare a server-named queue for type {STREAM_TYPE_NAME}")
    for bad, prop in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner")):
        if bad:
            raise PreconditionFailed(f"invalid property '{prop}' for {rs('queue', q, v)}")
    if not durable:
        raise PreconditionFailed(f"invalid property 'non-durable' for {rs('queue', q, v)}")
    if segment > MAX_STREAM_MAX_SEGMENT_SIZE:
        raise PreconditionFailed("Exceeded max value for x-stream-max-segment-size-bytes")
    if not MIN_FILTER_SIZE_BYTES <= filter_size <= MAX_FILTER_SIZE_BYTES:
        raise PreconditionFailed("Invalid value for x-stream-filter-size-bytes")

    table = {k: _plain(args[k]) for k in EQUIVALENCE_KEYS if k in args}
    table.setdefault("x-queue-type", DEFAULT_QUEUE_TYPE)
    return StreamArguments(
        max_length_bytes=max_length_bytes,
        max_age_ms=max_age_ms,
        max_segment_size_bytes=segment,
        filter_size_bytes=filter_size,
        compression=compression,
        initial_cluster_size=cluster_size,
        leader_locator=locator,
        table=table,
    )


def _plain(value: Any) -> Any:
    """Stream argument values as JSON-safe Python values (longstr bytes become text)."""
    text = _as_text(value)
    return text if text is not None else value


def stream_arguments_from_table(table: dict[str, Any], queue: str, vhost: str) -> StreamArguments:
    """Rebuild StreamArguments from a persisted table (definitions restore)."""
    return validate_stream_declare(queue, vhost, True, False, False, table)


def assert_equivalence(
    existing_args: dict[str, Any], new_args: dict[str, Any] | None, queue: str, vhost: str
) -> None:
    """Raise 406 ``inequivalent arg`` when a redeclare changes one of the stream's arguments.

    A redeclare without ``x-queue-type`` gets the vhost default (stream) filled in first, as
    RabbitMQ 4.x does. Integers compare by value whatever their wire type.
    """
    new = dict(new_args or {})
    new.setdefault("x-queue-type", DEFAULT_QUEUE_TYPE)
    for key in EQUIVALENCE_KEYS:
        old_v, new_v = existing_args.get(key), new.get(key)
        if old_v is None and new_v is None:
            continue
        if old_v is not None and new_v is not None and _same(old_v, new_v):
            continue
        raise PreconditionFailed(
            f"inequivalent arg '{key}' for {rs('queue', queue, vhost)}: "
            f"received {_val(new_v)} but current is {_val(old_v)}"
        )


def _same(a: Any, b: Any) -> bool:
    if type_class(a) != type_class(b):
        return False
    if isinstance(a, str | bytes) and isinstance(b, str | bytes):
        return _as_text(a) == _as_text(b)
    return bool(a == b)


def _val(value: Any) -> str:
    if value is None:
        return "none"
    return f"the value '{display_value(value)}' of type '{amqp_type(value)}'"


def assert_field_equivalence(
    field_name: str, current: bool, received: bool, queue: str, vhost: str
) -> None:
    """``inequivalent arg 'durable' ...: received 'false' but current is 'true'``."""
    if current != received:
        raise PreconditionFailed(
            f"inequivalent arg '{field_name}' for {rs('queue', queue, vhost)}: "
            f"received '{display_value(received)}' but current is '{display_value(current)}'"
        )


def assert_exclusive_access(
    existing_exclusive: bool, exclusive: bool, queue: str, vhost: str
) -> None:
    """405 when a redeclare asks for exclusivity a stream (never exclusive) cannot give."""
    if existing_exclusive != exclusive:
        raise ResourceLocked(
            f"cannot obtain exclusive access to locked {rs('queue', queue, vhost)}. It could "
            "be originally declared on another connection or the exclusive property value "
            "does not match that of the original declaration."
        )


# --------------------------------------------------------------------------- consume


def parse_offset_spec(
    value: Any, *, queue: str = "", vhost: str = "/", now_ms: int | None = None
) -> OffsetSpec:
    """``x-stream-offset`` as RabbitMQ reads it (docs/compatibility.md, "Consuming").

    ``first``/``last``/``next``; any integer is an offset (negative means first); an AMQP
    timestamp is seconds; another string is an interval before now (``30m``, ``7D``).
    ``queue``/``vhost`` name the queue in the 406 text.
    """
    if _is_int(value):
        return OffsetSpec("first") if value < 0 else OffsetSpec("offset", int(value))
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return OffsetSpec("timestamp", int(value.timestamp()) * 1000)
    text = _as_text(value)
    if text is not None:
        if text in ("first", "last", "next"):
            return OffsetSpec(text)  # type: ignore[arg-type]
        interval = duration_ms(text)
        if interval is not None:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            return OffsetSpec("timestamp", now - interval)
    reason = f"{{invalid_stream_offset_arg,{{{amqp_type(value)},{erlang_value(value)}}}}}"
    raise _invalid_arg("x-stream-offset", queue, vhost, reason)


_INTEGER = re.compile(r"[+-]?[0-9]+")


def offset_from_text(
    text: str, *, queue: str = "", vhost: str = "/", now_ms: int | None = None
) -> OffsetSpec:
    """``x-stream-offset`` written as text (an HTTP query parameter), read by
    ``parse_offset_spec``: an integer is an offset, an ISO 8601 date-time is the AMQP
    timestamp the argument may carry, anything else the string it may carry (``first``,
    ``last``, ``next``, an interval before now such as ``30m``)."""
    value: Any = text.strip()
    if _INTEGER.fullmatch(value):
        value = int(value)
    elif value[:1].isdigit():
        # else an interval such as 30m, or not an offset at all (the 406 names it)
        with contextlib.suppress(ValueError):
            value = datetime.datetime.fromisoformat(value)
    return parse_offset_spec(value, queue=queue, vhost=vhost, now_ms=now_ms)


def parse_consumer_arguments(
    arguments: dict[str, Any] | None, queue: str, vhost: str, *, now_ms: int | None = None
) -> ConsumerOptions:
    """Validate basic.consume arguments for a stream, in RabbitMQ's order (docs/compatibility.md).

    x-stream-offset first, then the rejected x-priority, then SieveMQ's filter arguments.
    """
    args = arguments or {}
    q, v = queue, vhost
    offset, given = NEXT, False
    if "x-stream-offset" in args:
        offset = parse_offset_spec(args["x-stream-offset"], queue=q, vhost=v, now_ms=now_ms)
        given = True
    if "x-priority" in args:
        raise PreconditionFailed(
            f"invalid arg 'x-priority' for {rs('queue', q, v)} of queue type {STREAM_TYPE_NAME}"
        )
    values: tuple[str, ...] = ()
    if "x-stream-filter" in args:
        values = _consumer_filter(args["x-stream-filter"], q, v)
    match_unfiltered = False
    if "x-stream-match-unfiltered" in args:
        raw = args["x-stream-match-unfiltered"]
        if not isinstance(raw, bool):
            raise _invalid_arg("x-stream-match-unfiltered", q, v, _unacceptable(raw))
        match_unfiltered = raw
    match_all = False
    if "x-filter-match-type" in args:
        text = _text_arg("x-filter-match-type", args["x-filter-match-type"], q, v)
        if text not in ("any", "all"):
            reason = erlang_string(f"unknown match type '{text}'; use 'any' or 'all'")
            raise _invalid_arg("x-filter-match-type", q, v, reason)
        match_all = text == "all"
    name = None
    if "x-stream-consumer-name" in args:
        raw = args["x-stream-consumer-name"]
        if not isinstance(raw, str):
            raise _invalid_arg("x-stream-consumer-name", q, v, _unacceptable(raw))
        size = len(raw.encode("utf-8"))
        if not 1 <= size <= MAX_CONSUMER_NAME_BYTES or "\x00" in raw:
            reason = erlang_string("consumer name must be 1..255 bytes of UTF-8 without NUL")
            raise _invalid_arg("x-stream-consumer-name", q, v, reason)
        name = raw
    sql = None
    if "x-stream-filter-sql" in args:
        raw = args["x-stream-filter-sql"]
        if not isinstance(raw, str):
            raise _invalid_arg("x-stream-filter-sql", q, v, _unacceptable(raw))
        sql = raw
    return ConsumerOptions(
        offset=offset,
        offset_given=given,
        values=values,
        match_unfiltered=match_unfiltered if values else False,
        match_all=match_all,
        consumer_name=name,
        sql=sql,
    )


def _consumer_filter(raw: Any, queue: str, vhost: str) -> tuple[str, ...]:
    key = "x-stream-filter"
    if isinstance(raw, list | tuple):
        if not raw:
            raise _invalid_arg(key, queue, vhost, erlang_string("empty array of filter values"))
        items = list(raw)
    elif isinstance(raw, str | bytes):
        items = [raw]
    else:
        raise _invalid_arg(key, queue, vhost, _unacceptable(raw))
    if len(items) > MAX_FILTER_VALUES:
        reason = f"{len(items)} filter values, at most {MAX_FILTER_VALUES} are allowed"
        raise _invalid_arg(key, queue, vhost, erlang_string(reason))
    out: list[str] = []
    for index, item in enumerate(items):
        why = _filter_value_problem(item, index if isinstance(raw, list | tuple) else None)
        if why is not None:
            raise _invalid_arg(key, queue, vhost, erlang_string(why))
        text = item if isinstance(item, str) else item.decode("utf-8")
        if text not in out:
            out.append(text)
    return tuple(out)


# --------------------------------------------------------------------------- publish


def _filter_value_problem(item: Any, index: int | None) -> str | None:
    """Why one filter value is invalid, or None. ``index`` names its place in an array."""
    where = "" if index is None else f"element {index}: "
    if isinstance(item, bytes):
        try:
            item = item.decode("utf-8")
        except UnicodeDecodeError:
            return f"{where}not valid UTF-8"
    elif not isinstance(item, str):
        return f"{where}expected longstr, got {amqp_type(item)}"
    if not item:
        return f"{where}empty value"
    if "\x00" in item:
        return f"{where}contains NUL"
    size = len(item) if item.isascii() else len(item.encode("utf-8", errors="surrogatepass"))
    if size > MAX_FILTER_VALUE_BYTES:
        return f"{where}{size} bytes, at most {MAX_FILTER_VALUE_BYTES} are allowed"
    if not item.isascii():
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where}not valid UTF-8"
    return None


def parse_filter_values(headers_value: Any) -> tuple[str, ...]:
    """The filter values of a published message from its ``x-stream-filter-value`` header.

    None (no header), ``""`` and an empty array mean no value. A longstr is one value; an
    array of longstr is several (SieveMQ extension), duplicates dropped, order kept. Each
    value is valid UTF-8 without NUL, 1..4096 bytes; at most 64. Otherwise 406
    ``invalid x-stream-filter-value: <why>``. Hot path.
    """
    if headers_value is None or headers_value == "" or headers_value == b"":
        return ()
    if isinstance(headers_value, str):
        if (
            headers_value.isascii()
            and len(headers_value) <= MAX_FILTER_VALUE_BYTES
            and "\x00" not in headers_value
        ):
            return (headers_value,)
        items: list[Any] = [headers_value]
        single = True
    elif isinstance(headers_value, bytes):
        items, single = [headers_value], True
    elif isinstance(headers_value, list | tuple):
        items, single = list(headers_value), False
        if len(items) > MAX_FILTER_VALUES:
            raise _bad_filter_value(f"{len(items)} values, at most {MAX_FILTER_VALUES}")
    else:
        raise _bad_filter_value(
            f"expected longstr or array of longstr, got {amqp_type(headers_value)}"
        )
    out: list[str] = []
    for index, item in enumerate(items):
        why = _filter_value_problem(item, None if single else index)
        if why is not None:
            raise _bad_filter_value(why)
        text = item if isinstance(item, str) else item.decode("utf-8")
        if text not in out:
            out.append(text)
    return tuple(out)


def _bad_filter_value(why: str) -> PreconditionFailed:
    return PreconditionFailed(f"invalid x-stream-filter-value: {why}")


# --------------------------------------------------------------------------- stream ops


def purge_not_supported(queue: str, vhost: str) -> NotImplemented_:
    """540 for queue.purge on a stream (connection-level, as RabbitMQ)."""
    return NotImplemented_(
        f"queue.purge not supported by stream queues {rs('queue', queue, vhost)}"
    )


def get_not_supported(queue: str, vhost: str) -> NotImplemented_:
    """540 for basic.get on a stream."""
    return NotImplemented_(f"basic.get not supported by stream queues {rs('queue', queue, vhost)}")


def prefetch_not_set(queue: str, vhost: str) -> PreconditionFailed:
    """406 for basic.consume on a stream without a per-consumer prefetch (4.x text)."""
    return PreconditionFailed(
        f"consumer prefetch count is not set for stream {rs('queue', queue, vhost)}"
    )


def auto_ack_not_supported(queue: str, vhost: str) -> NotImplemented_:
    """540 for basic.consume no_ack=true on a stream (4.x text)."""
    return NotImplemented_(
        f"automatic acknowledgement not supported by stream {rs('queue', queue, vhost)}"
    )


def global_qos_not_supported(queue: str, vhost: str) -> NotImplemented_:
    """540 for basic.consume on a stream from a channel with global QoS."""
    return NotImplemented_(f"{rs('queue', queue, vhost)} does not support global qos")
