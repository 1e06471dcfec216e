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

from pamqp import commands, decode

from sievemq.amqp import errors

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


# size of fixed-width field values by type octet; variable ones are handled in _skip_value
_FIXED_SIZES: Final = {
    0x74: 1,  # t boolean
    0x62: 1,  # b short-short int
    0x42: 1,  # B short-short uint
    0x73: 2,  # s short int
    0x75: 2,  # u short uint
    0x49: 4,  # I long int
    0x69: 4,  # i long uint
    0x6C: 8,  # l long-long int
    0x4C: 8,  # L long-long uint
    0x66: 4,  # f float
    0x64: 8,  # d double
    0x44: 5,  # D decimal
    0x54: 8,  # T timestamp
    0x56: 0,  # V void
    0x00: 0,  # seen in the wild, pamqp reads it as void
}
_TABLE = 0x46  # F
_ARRAY = 0x41  # A
_LONGSTR = 0x53  # S
_BYTES = 0x78  # x


def _skip_value(data: bytes, pos: int, end: int) -> int:
    """Offset after the field value (type octet included) at ``pos``; checks it fits."""
    if pos >= end:
        raise errors.FrameError("field value truncated")
    kind = data[pos]
    pos += 1
    size = _FIXED_SIZES.get(kind)
    if size is not None:
        pos += size
    elif kind in (_LONGSTR, _BYTES):
        if pos + 4 > end:
            raise errors.FrameError("field value truncated")
        pos += 4 + _I.unpack_from(data, pos)[0]
    elif kind == _TABLE:
        pos = _skip_table(data, pos, end)
    elif kind == _ARRAY:
        if pos + 4 > end:
            raise errors.FrameError("field array truncated")
        arr_end = pos + 4 + _I.unpack_from(data, pos)[0]
        if arr_end > end:
            raise errors.FrameError("field array longer than its container")
        pos += 4
        while pos < arr_end:
            pos = _skip_value(data, pos, arr_end)
    else:
        raise errors.FrameError(f"unknown field value type {bytes((kind,))!r}")
    if pos > end:
        raise errors.FrameError("field value longer than its container")
    return pos


def _skip_table(data: bytes, pos: int, end: int) -> int:
    """Offset after the field table (length prefix included) at ``pos``; checks it all.

    The common value types are skipped inline; nested tables and arrays recurse.
    """
    if pos + 4 > end:
        raise errors.FrameError("field table truncated")
    table_end: int = pos + 4 + _I.unpack_from(data, pos)[0]
    if table_end > end:
        raise errors.FrameError("field table longer than its container")
    pos += 4
    fixed = _FIXED_SIZES
    unpack = _I.unpack_from
    while pos < table_end:
        pos += 1 + data[pos]  # the key
        if pos >= table_end:
            raise errors.FrameError("field table entry truncated")
        kind = data[pos]
        size = fixed.get(kind)
        if size is not None:
            pos += 1 + size
        elif kind == _LONGSTR and pos + 5 <= table_end:
            pos += 5 + unpack(data, pos + 1)[0]
        else:
            pos = _skip_value(data, pos, table_end)
    if pos != table_end:
        raise errors.FrameError("field table entry longer than the table")
    return table_end


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


def check_properties(props: bytes) -> None:
    """Raise errors.FrameError unless ``props`` is a well-formed Basic property list."""
    flags, pos = _property_start(props)
    end = len(props)
    try:
        for kind in _layout(flags):
            if kind == _SHORTSTR:
                pos += 1 + props[pos]
            elif kind == _TABLE_PROP:
                pos = _skip_table(props, pos, end)
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
        pos = _skip_value(props, pos, table_end)
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
        value: object = decode.embedded_value(properties[start:end])[1]
    except (IndexError, struct.error, ValueError):
        raise errors.FrameError(f"cannot decode header {name!r}") from None
    return value


def decode_properties(properties: bytes) -> commands.Basic.Properties:
    """Raw property bytes -> pamqp Basic.Properties (cold path: admin views, tests)."""
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
    except (struct.error, ValueError, TypeError, IndexError):
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
