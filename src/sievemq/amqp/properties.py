"""The raw Basic property bytes: check, read and splice them without building objects.

HOT PATH. Properties stay the bytes the publisher sent (property flags + property list) from
the content header to the log and back out to every consumer. This module checks their
structure once on publish (``check_properties``: every length stays inside the frame, every
table value has a known type, so what is stored can always be delivered and decoded later),
reads one header when a caller needs it (``read_header`` decodes nothing unless the name
occurs in the bytes) and splices ``x-stream-offset`` into them on delivery
(``splice_stream_offset`` / ``splice_long_header``). ``decode_properties`` builds the pamqp
object for the cold paths (admin views, header routing, tests).

The filtering package reads stored messages through this module only (tests/test_architecture.py).
"""

from __future__ import annotations

import struct
from typing import Final

from pamqp import commands

from sievemq.amqp import errors, tables

FLAG_CONTENT_TYPE: Final = 0x8000
FLAG_CONTENT_ENCODING: Final = 0x4000
FLAG_HEADERS: Final = 0x2000

STREAM_OFFSET_HEADER: Final = "x-stream-offset"

_H = struct.Struct(">H")
_I = struct.Struct(">I")
_q = struct.Struct(">q")


def _property_start(props: bytes) -> tuple[int, int]:
    """(first flag word, offset of the property list) after all flag words."""
    try:
        flags = _H.unpack_from(props)[0]
        pos = 2
        word = flags
        while word & 1:
            word = _H.unpack_from(props, pos)[0]
            pos += 2
    except struct.error:
        raise errors.FrameError("content header property flags are truncated") from None
    return flags, pos


def _headers_position(props: bytes) -> tuple[int, int]:
    """(first flag word, offset where the headers table is or would be inserted)."""
    flags, pos = _property_start(props)
    if flags & FLAG_CONTENT_TYPE:
        pos += 1 + props[pos]
    if flags & FLAG_CONTENT_ENCODING:
        pos += 1 + props[pos]
    return flags, pos


_LONGSTR = 0x53  # S


# property flag bit -> wire type, in property-list order
_SHORTSTR, _TABLE_PROP, _OCTET, _TIMESTAMP = 0, 1, 2, 3
_PROPERTY_TYPES: Final = (
    (0x8000, _SHORTSTR),  # content_type
    (0x4000, _SHORTSTR),  # content_encoding
    (0x2000, _TABLE_PROP),  # headers
    (0x1000, _OCTET),  # delivery_mode
    (0x0800, _OCTET),  # priority
    (0x0400, _SHORTSTR),  # correlation_id
    (0x0200, _SHORTSTR),  # reply_to
    (0x0100, _SHORTSTR),  # expiration
    (0x0080, _SHORTSTR),  # message_id
    (0x0040, _TIMESTAMP),  # timestamp
    (0x0020, _SHORTSTR),  # type
    (0x0010, _SHORTSTR),  # user_id
    (0x0008, _SHORTSTR),  # app_id
    (0x0004, _SHORTSTR),  # cluster_id
)
_LAYOUTS: dict[int, tuple[int, ...]] = {}  # first flag word -> wire types present (<= 2**16)


def _layout(flags: int) -> tuple[int, ...]:
    layout = _LAYOUTS.get(flags)
    if layout is None:
        layout = tuple(kind for bit, kind in _PROPERTY_TYPES if flags & bit)
        _LAYOUTS[flags] = layout
    return layout


def check_properties(props: bytes, limits: tables.TableLimits = tables.DEFAULT_LIMITS) -> None:
    """Raise errors.FrameError unless ``props`` is a well-formed Basic property list.

    The headers table is held to ``limits`` (406 PRECONDITION_FAILED past one) and walked
    without recursion (``amqp.tables``)."""
    flags, pos = _property_start(props)
    end = len(props)
    try:
        for kind in _layout(flags):
            if kind == _SHORTSTR:
                pos += 1 + props[pos]
            elif kind == _TABLE_PROP:
                pos = tables.scan_table(props, pos, end, limits, "headers")
            elif kind == _OCTET:
                pos += 1
            else:
                pos += 8
    except IndexError:
        raise errors.FrameError("content header properties are truncated") from None
    # shortstr and key bytes are not checked for UTF-8: they are stored and sent as received
    if pos > end:
        raise errors.FrameError("content header properties are truncated")
    if pos != end:
        raise errors.FrameError("content header has bytes after its properties")


def _find_key(props: bytes, table: int, key: bytes) -> tuple[int, int, int] | None:
    """Locate ``key`` among the top-level entries of the table at ``table``.

    Returns (entry start, value start, entry end), or None when absent.
    """
    table_end = table + 4 + _I.unpack_from(props, table)[0]
    pos = table + 4
    klen = len(key)
    while pos < table_end:
        start = pos
        n = props[pos]
        pos += 1 + n
        value = pos
        pos = tables.skip_value(props, pos, table_end)
        if n == klen and props[start + 1 : value] == key:
            return start, value, pos
    return None


def splice_long_header(properties: bytes, name: str, value: int) -> bytes:
    """Return ``properties`` with header ``name`` set to ``value`` as AMQP long-long ('l').

    Adds the headers table (and its flag) when there is none; otherwise appends the entry to
    the table (replacing an entry of the same name) and fixes the table length. Every other
    byte is kept as sent.
    """
    key = name.encode("utf-8")
    entry = bytes((len(key),)) + key + b"l" + _q.pack(value)
    try:
        flags, pos = _headers_position(properties)
        if not flags & FLAG_HEADERS:
            return b"".join(
                (
                    _H.pack(flags | FLAG_HEADERS),
                    properties[2:pos],
                    _I.pack(len(entry)),
                    entry,
                    properties[pos:],
                )
            )
        size = _I.unpack_from(properties, pos)[0]
        body_start = pos + 4
        table_end = body_start + size
        if table_end > len(properties):
            raise errors.FrameError("headers table longer than the properties")
        old = properties[body_start:table_end]
        if properties.find(key, body_start, table_end) >= 0:
            found = _find_key(properties, pos, key)
            if found is not None:
                old = properties[body_start : found[0]] + properties[found[2] : table_end]
    except (IndexError, struct.error):
        raise errors.FrameError("content header properties are truncated") from None
    return b"".join(
        (properties[:pos], _I.pack(len(old) + len(entry)), old, entry, properties[table_end:])
    )


_OFFSET_KEY: Final = b"x-stream-offset"
# the header entry up to its value: key length, key, type 'l' (long-long); 8 value bytes follow
STREAM_OFFSET_ENTRY: Final = b"\x0fx-stream-offsetl"


def splice_stream_offset(properties: bytes, offset: int) -> bytes:
    """``splice_long_header(properties, 'x-stream-offset', offset)``, fast for the common case."""
    flags = properties[0] << 8 | properties[1]
    if flags & 1:  # more than one flag word: the general path
        return splice_long_header(properties, STREAM_OFFSET_HEADER, offset)
    pos = 2
    if flags & FLAG_CONTENT_TYPE:
        pos += 1 + properties[pos]
    if flags & FLAG_CONTENT_ENCODING:
        pos += 1 + properties[pos]
    if flags & FLAG_HEADERS:
        size = _I.unpack_from(properties, pos)[0]
        start = pos + 4
        table_end = start + size
        if table_end > len(properties) or properties.find(_OFFSET_KEY, start, table_end) >= 0:
            return splice_long_header(properties, STREAM_OFFSET_HEADER, offset)
        return b"".join(
            (
                properties[:pos],
                _I.pack(size + 25),
                properties[start:table_end],
                STREAM_OFFSET_ENTRY,
                _q.pack(offset),
                properties[table_end:],
            )
        )
    return b"".join(
        (
            _H.pack(flags | FLAG_HEADERS),
            properties[2:pos],
            b"\x00\x00\x00\x19",  # table length: 1 + 15 + 1 + 8
            STREAM_OFFSET_ENTRY,
            _q.pack(offset),
            properties[pos:],
        )
    )


def read_header(properties: bytes, name: str) -> object | None:
    """Value of header ``name``, or None. Decodes nothing unless the name occurs in the bytes."""
    key = name.encode("utf-8")
    if key not in properties:
        return None
    try:
        flags, pos = _headers_position(properties)
        if not flags & FLAG_HEADERS:
            return None
        found = _find_key(properties, pos, key)
        if found is None:
            return None
        start, end = found[1], found[2]
        if properties[start] == _LONGSTR:
            raw = properties[start + 5 : end]
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw  # as pamqp: a longstr that is not UTF-8 stays bytes
        value: object = tables.decode_value(properties, start, end, tables.UNLIMITED)[0]
    except (IndexError, struct.error, ValueError):
        raise errors.FrameError(f"cannot decode header {name!r}") from None
    return value


def decode_properties(properties: bytes) -> commands.Basic.Properties:
    """Raw property bytes -> pamqp Basic.Properties (cold path: admin views, tests).

    The headers table is decoded by ``amqp.tables`` (linear, no recursion), the rest by
    pamqp with the table cut out."""
    headers: dict[str, object] | None = None
    try:
        flags, pos = _headers_position(properties)
        if flags & FLAG_HEADERS:
            headers, after = tables.decode_table(
                properties, pos, len(properties), tables.UNLIMITED, "headers"
            )
            properties = b"".join(
                (_H.pack(flags & ~FLAG_HEADERS), properties[2:pos], properties[after:])
            )
    except (IndexError, struct.error):
        raise errors.FrameError("cannot decode content properties") from None
    result = _decode_properties(properties)
    if headers is not None:
        result.headers = headers  # type: ignore[assignment]
    return result


def _decode_properties(properties: bytes) -> commands.Basic.Properties:
    try:
        flags = 0
        pos = 0
        index = 0
        while True:
            word = _H.unpack_from(properties, pos)[0]
            pos += 2
            flags |= word << (index * 16)
            index += 1
            if not word & 1:
                break
        result = commands.Basic.Properties()
        result.unmarshal(flags, properties[pos:])
    except (struct.error, ValueError, TypeError, IndexError, OverflowError, OSError):
        raise errors.FrameError("cannot decode content properties") from None
    return result


__all__ = [
    "FLAG_CONTENT_ENCODING",
    "FLAG_CONTENT_TYPE",
    "FLAG_HEADERS",
    "STREAM_OFFSET_ENTRY",
    "STREAM_OFFSET_HEADER",
    "check_properties",
    "decode_properties",
    "read_header",
    "splice_long_header",
    "splice_stream_offset",
]
