"""AMQP 1.0 type system and message sections: a small pure-Python encoder and decoder.

Values decode to Python types: null -> None, booleans -> bool, integers -> int, float/double
-> float, binary -> bytes, string -> str, symbol -> ``Symbol``, timestamp -> ``Timestamp``
(ms), uuid -> ``uuid.UUID``, list/array -> list, map -> dict, char -> str, decimals ->
``Decimal128Raw`` bytes, other described values -> ``Described``. Encoding picks the
smallest AMQP 1.0 form for each Python type (int -> long, str -> string).

A message is a sequence of described sections (descriptor codes 0x70..0x78).
``decode_message`` splits them; ``encode_message`` writes them back in order.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# section descriptors (smallulong codes)
HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78


class Amqp10Error(ValueError):
    """Bytes that are not an AMQP 1.0 encoded message."""


class Symbol(str):
    """An AMQP 1.0 symbol (ASCII)."""

    __slots__ = ()


class Timestamp(int):
    """An AMQP 1.0 timestamp: milliseconds since the Unix epoch."""

    __slots__ = ()


class ULong(int):
    """An AMQP 1.0 ulong (kept so a message-id round-trips as a number)."""

    __slots__ = ()


class UByte(int):
    __slots__ = ()


class UInt(int):
    __slots__ = ()


@dataclass(frozen=True)
class Raw:
    """A value this codec does not model (decimal, char arrays ...): its encoding as is."""

    encoded: bytes


@dataclass(frozen=True)
class Described:
    descriptor: Any
    value: Any


@dataclass
class Message:
    """The sections of one AMQP 1.0 message (None = section absent)."""

    header: list[Any] | None = None
    delivery_annotations: dict[Any, Any] | None = None
    message_annotations: dict[Any, Any] | None = None
    properties: list[Any] | None = None
    application_properties: dict[Any, Any] | None = None
    body_kind: int = DATA  # DATA, AMQP_SEQUENCE or AMQP_VALUE
    body: list[Any] = field(default_factory=list)  # the section values in order
    body_bytes: bytes = b""  # the encoded body sections exactly as they were
    footer: dict[Any, Any] | None = None


# ---------------------------------------------------------------------------- decode

_B = struct.Struct(">B")
_b = struct.Struct(">b")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_II = struct.Struct(">II")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")

_FIXED_RAW = {0x74: 4, 0x84: 8, 0x94: 16}  # decimal32/64/128
# fixed-width scalars: constructor code -> (wire struct, Python type of the value)
_FIXED_WIDTH: dict[int, tuple[struct.Struct, Callable[[Any], Any]]] = {
    0x60: (_H, int),  # ushort
    0x61: (_h, int),  # short
    0x70: (_I, UInt),  # uint
    0x71: (_i, int),  # int
    0x72: (_f, float),  # float
    0x73: (_I, chr),  # char (UTF-32 code point)
    0x80: (_Q, ULong),  # ulong
    0x81: (_q, int),  # long
    0x82: (_d, float),  # double
    0x83: (_q, Timestamp),  # timestamp (ms)
}


def _need(data: bytes, pos: int, n: int) -> None:
    if pos + n > len(data):
        raise Amqp10Error(f"value runs past the end at byte {pos}")


def _size_and_count(data: bytes, pos: int, wide: bool, what: str) -> tuple[int, int, int]:
    """The size and count of a list, map or array (one byte each, or four with ``wide``):
    (count, the position of its first item, its end)."""
    if wide:
        _need(data, pos, 8)
        size, count = _II.unpack_from(data, pos)
        pos += 8
        end = pos + size - 4
    else:
        _need(data, pos, 2)
        size, count = data[pos], data[pos + 1]
        pos += 2
        end = pos + size - 1
    if end > len(data) or end < pos:
        raise Amqp10Error(f"{what} runs past the end")
    return count, pos, end


def decode_value(data: bytes, pos: int) -> tuple[Any, int]:
    """One value at ``pos``; returns it and the position after it."""
    _need(data, pos, 1)
    code = data[pos]
    pos += 1
    if code == 0x00:
        descriptor, pos = decode_value(data, pos)
        value, pos = decode_value(data, pos)
        return Described(descriptor, value), pos
    return _decode_constructor(code, data, pos)


def _decode_constructor(code: int, data: bytes, pos: int) -> tuple[Any, int]:
    if code == 0x40:
        return None, pos
    if code == 0x41:
        return True, pos
    if code == 0x42:
        return False, pos
    if code == 0x43:
        return UInt(0), pos
    if code == 0x44:
        return ULong(0), pos
    if code == 0x45:
        return [], pos
    if code in (0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56):
        _need(data, pos, 1)
        raw = data[pos]
        pos += 1
        if code == 0x50:
            return UByte(raw), pos
        if code == 0x52:
            return UInt(raw), pos
        if code == 0x53:
            return ULong(raw), pos
        if code == 0x56:
            return raw != 0, pos
        return _b.unpack_from(data, pos - 1)[0], pos
    fixed = _FIXED_WIDTH.get(code)
    if fixed is not None:
        st, kind = fixed
        _need(data, pos, st.size)
        return kind(st.unpack_from(data, pos)[0]), pos + st.size
    if code == 0x98:
        _need(data, pos, 16)
        return uuid.UUID(bytes=bytes(data[pos : pos + 16])), pos + 16
    if code in _FIXED_RAW:
        n = _FIXED_RAW[code]
        _need(data, pos, n)
        return Raw(bytes(data[pos - 1 : pos + n])), pos + n
    if code in (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3):
        if code < 0xB0:
            _need(data, pos, 1)
            n = data[pos]
            pos += 1
        else:
            _need(data, pos, 4)
            n = _I.unpack_from(data, pos)[0]
            pos += 4
        _need(data, pos, n)
        blob = bytes(data[pos : pos + n])
        pos += n
        if code in (0xA0, 0xB0):
            return blob, pos
        try:
            text = blob.decode()
        except UnicodeDecodeError as error:
            raise Amqp10Error(f"string is not UTF-8: {error}") from error
        return (text if code in (0xA1, 0xB1) else Symbol(text)), pos
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        count, pos, end = _size_and_count(data, pos, code >= 0xD0, "compound value")
        items = []
        for _ in range(count):
            value, pos = decode_value(data, pos)
            items.append(value)
        if pos != end:
            raise Amqp10Error("compound value size does not match its items")
        if code in (0xC0, 0xD0):
            return items, pos
        if count % 2:
            raise Amqp10Error("map with an odd number of items")
        try:
            return {items[i]: items[i + 1] for i in range(0, count, 2)}, pos
        except TypeError as error:
            raise Amqp10Error(f"map key is not hashable: {error}") from error
    if code in (0xE0, 0xF0):
        count, pos, end = _size_and_count(data, pos, code == 0xF0, "array")
        start = pos
        _need(data, pos, 1)
        elem = data[pos]
        pos += 1
        if elem == 0x00:
            # described arrays are rare: keep them as raw bytes
            return Raw(bytes(data[start - (2 if code == 0xE0 else 8) - 1 : end])), end
        out = []
        for _ in range(count):
            value, pos = _decode_constructor(elem, data, pos)
            out.append(value)
        if pos != end:
            raise Amqp10Error("array size does not match its items")
        return out, pos
    raise Amqp10Error(f"unknown AMQP 1.0 type code 0x{code:02x}")


def decode_message(data: bytes) -> Message:
    """Split an encoded message into its sections; raises Amqp10Error when it is not one."""
    msg = Message()
    pos = 0
    n = len(data)
    body_start = -1
    body_end = -1
    if n == 0:
        raise Amqp10Error("empty payload")
    while pos < n:
        start = pos
        if data[pos] != 0x00:
            raise Amqp10Error(f"byte {pos} does not start a described section")
        descriptor, pos = decode_value(data, pos + 1)
        value, pos = decode_value(data, pos)
        code = descriptor if isinstance(descriptor, int) else _SYMBOLIC.get(str(descriptor))
        if code == HEADER and isinstance(value, list):
            msg.header = value
        elif code == DELIVERY_ANNOTATIONS and isinstance(value, dict):
            msg.delivery_annotations = value
        elif code == MESSAGE_ANNOTATIONS and isinstance(value, dict):
            msg.message_annotations = value
        elif code == PROPERTIES and isinstance(value, list):
            msg.properties = value
        elif code == APPLICATION_PROPERTIES and isinstance(value, dict):
            msg.application_properties = value
        elif code in (DATA, AMQP_SEQUENCE, AMQP_VALUE):
            if body_start < 0:
                body_start = start
                msg.body_kind = code
            if code == DATA and not isinstance(value, bytes):
                raise Amqp10Error("data section is not binary")
            msg.body.append(value)
            body_end = pos
        elif code == FOOTER and isinstance(value, dict):
            msg.footer = value
        else:
            raise Amqp10Error(f"unknown or malformed section {descriptor!r}")
    if body_start >= 0:
        msg.body_bytes = bytes(data[body_start:body_end])
    return msg


_SYMBOLIC = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}


# ---------------------------------------------------------------------------- encode


def _sized(small: int, large: int, raw: bytes) -> bytes:
    n = len(raw)
    if n <= 0xFF:
        return bytes((small, n)) + raw
    return bytes((large,)) + _I.pack(n) + raw


def encode_value(value: Any) -> bytes:
    """The AMQP 1.0 encoding of a Python value (see the module docstring for the mapping)."""
    if value is None:
        return b"\x40"
    if value is True:
        return b"\x41"
    if value is False:
        return b"\x42"
    if isinstance(value, Timestamp):
        return b"\x83" + _q.pack(value)
    if isinstance(value, ULong):
        if value == 0:
            return b"\x44"
        if value <= 0xFF:
            return bytes((0x53, value))
        return b"\x80" + _Q.pack(value)
    if isinstance(value, UInt):
        if value == 0:
            return b"\x43"
        if value <= 0xFF:
            return bytes((0x52, value))
        return b"\x70" + _I.pack(value)
    if isinstance(value, UByte):
        return bytes((0x50, value))
    if isinstance(value, int):
        if -128 <= value <= 127:
            return b"\x55" + _b.pack(value)
        return b"\x81" + _q.pack(value)
    if isinstance(value, float):
        return b"\x82" + _d.pack(value)
    if isinstance(value, Symbol):
        return _sized(0xA3, 0xB3, value.encode())
    if isinstance(value, str):
        return _sized(0xA1, 0xB1, value.encode())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _sized(0xA0, 0xB0, bytes(value))
    if isinstance(value, uuid.UUID):
        return b"\x98" + value.bytes
    if isinstance(value, Raw):
        return value.encoded
    if isinstance(value, Described):
        return b"\x00" + encode_value(value.descriptor) + encode_value(value.value)
    if isinstance(value, dict):
        items = b"".join(encode_value(k) + encode_value(v) for k, v in value.items())
        return _compound(0xC1, 0xD1, items, len(value) * 2)
    if isinstance(value, (list, tuple)):
        if not value:
            return b"\x45"
        items = b"".join(encode_value(v) for v in value)
        return _compound(0xC0, 0xD0, items, len(value))
    raise TypeError(f"no AMQP 1.0 encoding for {type(value).__name__}")


def _compound(small: int, large: int, items: bytes, count: int) -> bytes:
    if len(items) + 1 <= 0xFF and count <= 0xFF:
        return bytes((small, len(items) + 1, count)) + items
    return bytes((large,)) + _I.pack(len(items) + 4) + _I.pack(count) + items


def section(code: int, value: Any) -> bytes:
    return bytes((0x00, 0x53, code)) + encode_value(value)


def _trim(fields: list[Any]) -> list[Any]:
    """A list-typed section without its trailing nulls (absent fields)."""
    end = len(fields)
    while end and fields[end - 1] is None:
        end -= 1
    return fields[:end]


def encode_message(msg: Message) -> bytes:
    parts: list[bytes] = []
    if msg.header is not None:
        parts.append(section(HEADER, _trim(msg.header)))
    if msg.delivery_annotations:
        parts.append(section(DELIVERY_ANNOTATIONS, msg.delivery_annotations))
    if msg.message_annotations:
        parts.append(section(MESSAGE_ANNOTATIONS, msg.message_annotations))
    if msg.properties is not None and any(v is not None for v in msg.properties):
        parts.append(section(PROPERTIES, _trim(msg.properties)))
    if msg.application_properties:
        parts.append(section(APPLICATION_PROPERTIES, msg.application_properties))
    if msg.body_bytes:
        parts.append(msg.body_bytes)
    else:
        parts.extend(section(msg.body_kind, value) for value in msg.body)
    if msg.footer:
        parts.append(section(FOOTER, msg.footer))
    return b"".join(parts)


def data_message(body: bytes) -> bytes:
    """A message of one data section (what most clients publish)."""
    return section(DATA, body)
