"""AMQP 0-9-1 <-> AMQP 1.0 message conversion by RabbitMQ's rules.

``to_amqp10`` turns a stored 0-9-1 record (exchange, routing key, raw property bytes, body)
into the AMQP 1.0 message a stream-protocol consumer receives; ``to_amqp091`` turns a
stream-protocol payload (AMQP 1.0 by convention) into what a 0-9-1 consumer receives.
docs/compatibility.md ("Stream protocol") lists what each direction loses.
"""

from __future__ import annotations

import datetime
import decimal
import urllib.parse
import uuid
from typing import Any, NamedTuple

from pamqp import commands

from sievemq.amqp import properties as amqp_properties
from sievemq.amqp.errors import FrameError
from sievemq.streamproto import amqp10
from sievemq.streamproto.amqp10 import Symbol, Timestamp, UByte, UInt

NO_PROPERTIES = b"\x00\x00"  # 0-9-1 property flags with nothing set
FILTER_HEADER = "x-stream-filter-value"
_UUID_PREFIX = "urn:uuid:"
_QUEUES = "/queues/"
# annotations RabbitMQ keeps for itself when it converts to 0-9-1
_INTERNAL = {"x-exchange", "x-routing-key", "x-death"}


# ---------------------------------------------------------------------------- 0-9-1 -> 1.0


def _id_to_amqp10(value: str) -> Any:
    if value.startswith(_UUID_PREFIX):
        try:
            return uuid.UUID(value[len(_UUID_PREFIX) :])
        except ValueError:
            return value
    return value


def _simple_value(value: Any) -> tuple[bool, Any]:
    """(ok, AMQP 1.0 value) for an application property; arrays and tables are not simple."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True, value
    if isinstance(value, datetime.datetime):
        return True, Timestamp(int(value.replace(tzinfo=datetime.UTC).timestamp()) * 1000)
    if isinstance(value, decimal.Decimal):
        return True, str(value)
    return False, None


def _annotation_value(value: Any) -> Any:
    ok, simple = _simple_value(value)
    if ok:
        return simple
    if isinstance(value, dict):
        return {str(k): _annotation_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_annotation_value(v) for v in value]
    return str(value)


def to_amqp10(exchange: str, routing_key: str, properties: bytes, body: bytes) -> bytes:
    """The AMQP 1.0 encoding of a message published over AMQP 0-9-1."""
    annotations: dict[Any, Any] = {Symbol("x-exchange"): exchange}
    annotations[Symbol("x-routing-key")] = routing_key
    if properties == NO_PROPERTIES or not properties:
        return amqp10.section(amqp10.MESSAGE_ANNOTATIONS, annotations) + amqp10.data_message(body)
    try:
        props = amqp_properties.decode_properties(properties)
    except FrameError:
        return amqp10.section(amqp10.MESSAGE_ANNOTATIONS, annotations) + amqp10.data_message(body)
    msg = amqp10.Message()
    header: list[Any] = [None, None, None]
    if props.delivery_mode is not None:
        header[0] = props.delivery_mode == 2
    if props.priority is not None:
        header[1] = UByte(props.priority)
    if props.expiration is not None and props.expiration.isdigit():
        header[2] = UInt(int(props.expiration))
    if any(v is not None for v in header):
        msg.header = header
    app: dict[Any, Any] = {}
    for key, value in (props.headers or {}).items():
        if key.startswith("x-"):
            annotations[Symbol(key)] = _annotation_value(value)
        elif key == "CC":
            annotations[Symbol("x-cc")] = _annotation_value(value)
        else:
            ok, simple = _simple_value(value)
            if ok:
                app[key] = simple
    if props.message_type is not None:
        annotations[Symbol("x-basic-type")] = props.message_type
    msg.message_annotations = annotations
    reply_to = props.reply_to
    if reply_to is not None and not reply_to.startswith("/"):
        reply_to = _QUEUES + urllib.parse.quote(reply_to, safe="")
    msg.properties = [
        _id_to_amqp10(props.message_id) if props.message_id is not None else None,
        props.user_id.encode() if props.user_id is not None else None,
        None,
        None,
        reply_to,
        _id_to_amqp10(props.correlation_id) if props.correlation_id is not None else None,
        Symbol(props.content_type) if props.content_type is not None else None,
        Symbol(props.content_encoding) if props.content_encoding is not None else None,
        None,
        _creation_time(props.timestamp),
        props.app_id,
    ]
    msg.application_properties = app or None
    if props.message_type == "amqp-1.0":
        try:
            parsed = amqp10.decode_message(body)
            msg.body_bytes = parsed.body_bytes
            msg.body_kind = parsed.body_kind
        except amqp10.Amqp10Error:
            msg.body = [body]
    else:
        msg.body = [body]
    return amqp10.encode_message(msg)


def _creation_time(value: datetime.datetime | None) -> Timestamp | None:
    if value is None:
        return None
    return Timestamp(int(value.replace(tzinfo=datetime.UTC).timestamp()) * 1000)


# ---------------------------------------------------------------------------- 1.0 -> 0-9-1


class Converted(NamedTuple):
    exchange: str
    routing_key: str
    properties: bytes  # raw 0-9-1 property flags + list
    body: bytes


def _short(value: str) -> bool:
    return len(value.encode()) <= 255


def _id_to_091(value: Any, header: str, headers: dict[str, Any]) -> str | None:
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        return _UUID_PREFIX + str(value)
    if isinstance(value, bool):
        headers[header] = str(value).lower()
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _short(value):
        return str(value)
    headers[header] = value if isinstance(value, (str, bytes)) else str(value)
    return None


def _header_value(value: Any) -> tuple[bool, Any]:
    """(ok, 0-9-1 field value) for an application property or annotation value."""
    if value is None or isinstance(value, (bool, float, bytes)):
        return True, value
    if isinstance(value, Timestamp):
        return True, datetime.datetime.fromtimestamp(value // 1000, tz=datetime.UTC)
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            return True, int(value)
        return True, str(value)
    if isinstance(value, str):
        return True, str(value)
    if isinstance(value, uuid.UUID):
        return True, str(value)
    if isinstance(value, list):
        items = [_header_value(v) for v in value]
        return True, [v for ok, v in items if ok]
    if isinstance(value, dict):
        table = {}
        for k, v in value.items():
            ok, converted = _header_value(v)
            if ok and isinstance(k, str):
                table[str(k)] = converted
        return True, table
    return False, None


def _field(fields: list[Any] | None, index: int) -> Any:
    if fields is None or index >= len(fields):
        return None
    return fields[index]


def to_amqp091(payload: bytes, stream: str, filter_values: tuple[str, ...] = ()) -> Converted:
    """What a 0-9-1 consumer receives for a stream-protocol payload.

    A payload that is not AMQP 1.0 arrives as its raw bytes with no properties (besides the
    filter value header); RabbitMQ's behaviour for it is not documented.
    """
    try:
        msg = amqp10.decode_message(payload)
    except amqp10.Amqp10Error:
        raw_props = NO_PROPERTIES
        if filter_values:
            table: dict[str, Any] = {FILTER_HEADER: filter_values[0]}
            raw_props = commands.Basic.Properties(headers=table).marshal()
        return Converted("", stream, raw_props, payload)
    headers: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    header = msg.header
    if header is not None:
        kwargs["delivery_mode"] = 2 if _field(header, 0) else 1
        priority = _field(header, 1)
        if isinstance(priority, int):
            kwargs["priority"] = priority
        ttl = _field(header, 2)
        if isinstance(ttl, int):
            kwargs["expiration"] = str(ttl)
    fields = msg.properties
    message_id = _id_to_091(_field(fields, 0), "x-message-id", headers)
    if message_id is not None:
        kwargs["message_id"] = message_id
    user_id = _field(fields, 1)
    if isinstance(user_id, bytes):
        try:
            text = user_id.decode()
            if _short(text):
                kwargs["user_id"] = text
        except UnicodeDecodeError:
            pass
    reply_to = _field(fields, 4)
    if isinstance(reply_to, str):
        if reply_to.startswith(_QUEUES):
            reply_to = urllib.parse.unquote(reply_to[len(_QUEUES) :])
        if _short(reply_to):
            kwargs["reply_to"] = reply_to
    correlation_id = _id_to_091(_field(fields, 5), "x-correlation-id", headers)
    if correlation_id is not None:
        kwargs["correlation_id"] = correlation_id
    for index, name in ((6, "content_type"), (7, "content_encoding")):
        value = _field(fields, index)
        if isinstance(value, str) and _short(value):
            kwargs[name] = str(value)
    created = _field(fields, 9)
    if isinstance(created, int):
        kwargs["timestamp"] = datetime.datetime.fromtimestamp(created // 1000, tz=datetime.UTC)
    group_id = _field(fields, 10)
    if isinstance(group_id, str) and _short(group_id):
        kwargs["app_id"] = group_id
    for key, value in (msg.application_properties or {}).items():
        if isinstance(key, str) and _short(key):
            ok, converted = _header_value(value)
            if ok:
                headers[str(key)] = converted
    exchange = ""
    routing_key = stream
    for key, value in (msg.message_annotations or {}).items():
        name = str(key)
        if name == "x-exchange" and isinstance(value, str):
            exchange = str(value)
        elif name == "x-routing-key" and isinstance(value, str):
            routing_key = str(value)
        elif name == "x-basic-type" and isinstance(value, str):
            kwargs["message_type"] = str(value)
        elif name.startswith("x-basic-") or name in _INTERNAL or not name.startswith("x-"):
            continue
        elif name == "x-cc":
            ok, converted = _header_value(value)
            if ok:
                headers["CC"] = converted
        elif name == "x-opt-rabbitmq-received-time":
            ok, converted = _header_value(value)
            if ok:
                headers["timestamp_in_ms"] = converted
        else:
            ok, converted = _header_value(value)
            if ok:
                headers[name] = converted
    if filter_values and FILTER_HEADER not in headers:
        headers[FILTER_HEADER] = filter_values[0]
    if msg.body_kind == amqp10.DATA:
        body = b"".join(msg.body)
    else:
        kwargs.setdefault("message_type", "amqp-1.0")
        body = msg.body_bytes
    if headers:
        kwargs["headers"] = headers
    try:
        raw = commands.Basic.Properties(**kwargs).marshal()
    except (TypeError, ValueError):
        raw = NO_PROPERTIES
    return Converted(exchange, routing_key, raw, body)
