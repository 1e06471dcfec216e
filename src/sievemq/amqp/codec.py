"""Cold methods through pamqp: every method frame that is not sent once per message.

Connection negotiation, channel open/close, declarations, consume, qos, cancel... are decoded
into pamqp command objects (``decode_method``) and encoded from them (``encode_method``).
The per-message frames are coded by hand in ``sievemq.amqp.hotcodec``; the raw property
bytes are read and spliced in ``sievemq.amqp.properties``.
"""

from __future__ import annotations

import struct
from typing import Final

from pamqp import base, commands, frame

from sievemq.amqp import errors, tables
from sievemq.amqp.hotcodec import method_id

# methods a client sends with a field table: the fields before the table (H: short, B:
# octet, s: shortstr) and the attribute that holds it
_TABLE_METHODS: Final[dict[tuple[int, int], tuple[str, str]]] = {
    (10, 11): ("", "client_properties"),  # connection.start-ok
    (40, 10): ("HssB", "arguments"),  # exchange.declare
    (40, 30): ("HsssB", "arguments"),  # exchange.bind
    (40, 40): ("HsssB", "arguments"),  # exchange.unbind
    (50, 10): ("HsB", "arguments"),  # queue.declare
    (50, 20): ("HsssB", "arguments"),  # queue.bind
    (50, 50): ("Hsss", "arguments"),  # queue.unbind
    (60, 20): ("HssB", "arguments"),  # basic.consume
}


def _table_start(payload: bytes, layout: str) -> int:
    pos = 4
    for kind in layout:
        pos += 2 if kind == "H" else 1 if kind == "B" else 1 + payload[pos]
    return pos


def decode_method(payload: bytes, limits: tables.TableLimits = tables.DEFAULT_LIMITS) -> base.Frame:
    """Any method frame payload -> pamqp command object.

    Unknown (class, method) pairs raise 540 NOT_IMPLEMENTED; undecodable arguments 501. A
    method's field table (arguments, client properties) is decoded by ``amqp.tables``, held
    to ``limits`` (406 past one), and pamqp decodes the rest with the table cut out (its
    table decoder recurses per level and copies the frame's rest per entry).
    """
    class_id, mid = method_id(payload)
    cls: type[base.Frame] | None = commands.INDEX_MAPPING.get(class_id << 16 | mid)
    if cls is None:
        raise errors.NotImplemented_(f"unknown method {class_id}.{mid}", class_id, mid)
    method: base.Frame = cls()
    table: tuple[str, dict[str, object]] | None = None
    try:
        shape = _TABLE_METHODS.get((class_id, mid))
        if shape is not None:
            start = _table_start(payload, shape[0])
            what = f"{shape[1]} of {cls.name.lower()}"
            try:
                value, after = tables.decode_table(payload, start, len(payload), limits, what)
            except errors.AMQPError as error:
                error.class_id, error.method_id = class_id, mid
                raise
            table = (shape[1], value)
            payload = b"".join((payload[:start], b"\x00\x00\x00\x00", payload[after:]))
        method.unmarshal(bytes(payload[4:]))
    except (struct.error, ValueError, TypeError, IndexError, OverflowError):
        raise errors.FrameError(f"cannot decode {cls.name}", class_id, mid) from None
    if table is not None:
        setattr(method, table[0], table[1])
    return method


def encode_queue_declare_ok(
    channel: int, queue: str, message_count: int, consumer_count: int
) -> bytes:
    """A whole Queue.DeclareOk frame, by hand: pamqp's refuses queue names outside its
    pattern (``[a-zA-Z0-9-_.:@#,/+ ]``) while RabbitMQ, and SieveMQ, accept any UTF-8 name
    of up to 255 bytes (a declare of ``"é"`` raised ValueError: 541 INTERNAL_ERROR)."""
    name = queue.encode("utf-8")
    if len(name) > 255:
        raise ValueError(f"queue name longer than 255 bytes: {len(name)}")
    payload = (
        _DECLARE_OK_HEAD.pack(50, 11, len(name))
        + name
        + _DECLARE_OK_COUNTS.pack(min(message_count, 0xFFFFFFFF), min(consumer_count, 0xFFFFFFFF))
    )
    return _FRAME_HEAD.pack(1, channel, len(payload)) + payload + b"\xce"


_DECLARE_OK_HEAD = struct.Struct(">HHB")
_DECLARE_OK_COUNTS = struct.Struct(">II")
_FRAME_HEAD = struct.Struct(">BHI")


def encode_method(channel: int, method: base.Frame) -> bytes:
    """A whole method frame for a pamqp command object."""
    return frame.marshal(method, channel)


__all__ = ["decode_method", "encode_method", "encode_queue_declare_ok"]
