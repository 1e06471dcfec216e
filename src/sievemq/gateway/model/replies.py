"""How RabbitMQ prints resources, AMQP field types and Erlang terms in reply texts.

Reply texts must match RabbitMQ's byte for byte (clients and tests compare them), so every
rendering lives here once. pamqp has already decoded field values into Python objects, so the
AMQP type is inferred from the Python type (an ``int`` is reported as ``long``, the type
pamqp itself encodes large integers with).
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any


def rs(kind: str, name: str, vhost: str) -> str:
    """``queue 'q' in vhost '/'``: RabbitMQ's ``rabbit_misc:rs/1``."""
    return f"{kind} '{name}' in vhost '{vhost}'"


def amqp_type(value: Any) -> str:
    """The RabbitMQ name of the AMQP field type a decoded value came in."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, bytearray | memoryview):
        return "binary"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list | tuple):
        return "array"
    if value is None:
        return "void"
    return type(value).__name__


def type_class(value: Any) -> str:
    """RabbitMQ's ``type_class``: all integer types compare as one class."""
    kind = amqp_type(value)
    return "int" if kind == "long" else kind


def erlang_value(value: Any) -> str:
    """A decoded value as ``~p`` prints the Erlang term RabbitMQ holds for it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return str(value)
    if isinstance(value, str):
        return '<<"' + _escape(value) + '">>'
    if isinstance(value, bytes | bytearray):
        return "<<" + ",".join(str(b) for b in value) + ">>"
    if isinstance(value, datetime.datetime):
        return str(_seconds(value))
    if isinstance(value, list | tuple):
        return "[" + ",".join(f"{{{amqp_type(v)},{erlang_value(v)}}}" for v in value) + "]"
    if isinstance(value, dict):
        items = (
            f'{{<<"{_escape(k)}">>,{amqp_type(v)},{erlang_value(v)}}}' for k, v in value.items()
        )
        return "[" + ",".join(items) + "]"
    if value is None:
        return "undefined"
    return repr(value)


def erlang_string(text: str) -> str:
    """A charlist as ``~p`` prints it: in double quotes."""
    return '"' + _escape(text) + '"'


def display_value(value: Any) -> str:
    """A value as ``~ts``/``~tp`` prints it inside ``the value '...'``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, datetime.datetime):
        return str(_seconds(value))
    return str(value)


def _seconds(value: datetime.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return int(value.timestamp())


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
