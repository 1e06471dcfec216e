"""Values as the admin plane's JSON shows them: field-table values and AMQP message properties."""

from __future__ import annotations

import base64
import datetime
from decimal import Decimal
from typing import Any

from pamqp.commands import Basic

from sievemq.amqp import properties as amqp_properties
from sievemq.amqp.errors import AMQPError
from sievemq.gateway.admin.errors import BadRequest


def jsonable(value: Any) -> Any:
    """Field-table values as JSON (bytes as text when UTF-8, timestamps as epoch seconds)."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp())
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)


_PROPERTY_NAMES = {
    "content_type": str,
    "content_encoding": str,
    "headers": dict,
    "delivery_mode": int,
    "priority": int,
    "correlation_id": str,
    "reply_to": str,
    "expiration": str,
    "message_id": str,
    "timestamp": int,
    "type": str,
    "user_id": str,
    "app_id": str,
}


def encode_properties(properties: dict[str, Any]) -> bytes:
    """JSON message properties (RabbitMQ's management names) as raw AMQP property bytes."""
    kwargs: dict[str, Any] = {}
    for key, value in properties.items():
        kind = _PROPERTY_NAMES.get(key)
        if kind is None:
            raise BadRequest(f"unknown message property '{key}'")
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise BadRequest(f"message property '{key}' must be an integer")
        if kind is not int and not isinstance(value, kind):
            raise BadRequest(f"message property '{key}' must be a {kind.__name__}")
        if key == "timestamp":
            value = datetime.datetime.fromtimestamp(value, datetime.UTC)
        kwargs[key] = value
    try:
        return bytes(Basic.Properties(**kwargs).marshal())
    except (TypeError, ValueError) as error:
        raise BadRequest(f"bad message properties: {error}") from None


def decode_properties(props: bytes) -> dict[str, Any]:
    """Raw property bytes as the JSON object RabbitMQ's management API shows."""
    try:
        decoded = amqp_properties.decode_properties(props)
    except AMQPError:
        return {}
    out: dict[str, Any] = {}
    for key in _PROPERTY_NAMES:
        value = getattr(decoded, key, None)
        if value is not None and value != {}:
            out[key] = jsonable(value)
    return out
