"""A stored message's AMQP properties as plain values, for readers outside the gateway.

``plain_properties(raw)`` turns the raw content-header property bytes a record carries into
(basic properties dict, headers as strings). Header values are rendered as text: strings as
they are, byte strings as UTF-8 (undecodable bytes escaped), booleans as ``true``/``false``,
numbers with ``str``, timestamps in ISO-8601 (UTC), arrays and tables as JSON. Cold-ish path:
Spark readers cache the answer per distinct property bytes.
"""

from __future__ import annotations

import datetime
import json
from decimal import Decimal

from sievemq.amqp.properties import decode_properties

# the AMQP basic properties (the names SQL's ``properties.<name>`` takes) and pamqp's attribute
BASIC_PROPERTY_NAMES: tuple[str, ...] = (
    "content_type",
    "content_encoding",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
)
_PAMQP = {"type": "message_type"}


def header_text(value: object) -> str | None:
    """One header value as text (None stays None)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value.isoformat()
    if isinstance(value, int | float | Decimal):
        return str(value)
    return json.dumps(_jsonable(value), separators=(",", ":"))


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return header_text(value)


def plain_properties(raw: bytes) -> tuple[dict[str, object], list[tuple[str, str | None]]]:
    """(basic properties by SQL name, headers as (name, text) pairs) of raw property bytes.

    Absent properties are None; ``timestamp`` is an aware UTC datetime. Raises
    ``sievemq.amqp.errors.FrameError`` on bytes that are not a property list.
    """
    if not raw or raw == b"\x00\x00":
        return dict.fromkeys(BASIC_PROPERTY_NAMES), []
    props = decode_properties(raw)
    basic: dict[str, object] = {}
    for name in BASIC_PROPERTY_NAMES:
        value = getattr(props, _PAMQP.get(name, name), None)
        if isinstance(value, datetime.datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        basic[name] = value
    headers = props.headers
    pairs = (
        [(str(k), header_text(v)) for k, v in headers.items()] if isinstance(headers, dict) else []
    )
    return basic, pairs
