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

from sievemq.amqp import errors, tables
from sievemq.amqp.tables import SIZED, TYPE_LONGSTR, VALUE_SIZES

FLAG_CONTENT_TYPE: Final = 0x8000
FLAG_CONTENT_ENCODING: Final = 0x4000
FLAG_HEADERS: Final = 0x2000
FLAG_DELIVERY_MODE: Final = 0x1000
FLAG_PRIORITY: Final = 0x0800
FLAG_CORRELATION_ID: Final = 0x0400
FLAG_REPLY_TO: Final = 0x0200
FLAG_EXPIRATION: Final = 0x0100

STREAM_OFFSET_HEADER: Final = "x-stream-offset"

_H = struct.Struct(">H")
_I = struct.Struct(">I")
_q = struct.Struct(">q")


def _property_start(props: bytes) -> tuple[int, int]:
    """(first flag word, offset of the property list) after all flag words."""
    if len(props) > 1 and not props[1] & 1:
        return props[0] << 8 | props[1], 2  # one flag word: the usual case
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


def delivery_fields(props: bytes) -> tuple[int, int, bytes | None]:
    """(delivery-mode, priority, expiration) of a Basic property list: 0, 0 and None for the
    ones it does not have; what a classic queue keeps of a message's properties. The walk
    goes on from ``_headers_position`` (table lengths are read, not their entries:
    ``check_properties`` has checked them on publish)."""
    mode = priority = 0
    expiration = None
    try:
        flags, pos = _headers_position(props)
        if flags & FLAG_HEADERS:
            pos += 4 + _I.unpack_from(props, pos)[0]
        if flags & FLAG_DELIVERY_MODE:
            mode = props[pos]
            pos += 1
        if flags & FLAG_PRIORITY:
            priority = props[pos]
            pos += 1
        if flags & FLAG_EXPIRATION:
            if flags & FLAG_CORRELATION_ID:
                pos += 1 + props[pos]
            if flags & FLAG_REPLY_TO:
                pos += 1 + props[pos]
            expiration = props[pos + 1 : pos + 1 + props[pos]]
    except (IndexError, struct.error):
        raise errors.FrameError("content header properties are truncated") from None
    return mode, priority, expiration


def _skip_value(data: bytes, pos: int, end: int) -> int:
    """Offset after the field value (type octet included) at ``pos``; checks it fits.

    Nested tables and arrays are walked by ``amqp.tables`` without recursion."""
    return tables.skip_value(data, pos, end)


def _walk_table(data: bytes, pos: int, end: int, key: bytes | None) -> tuple[int, int]:
    """Check the field table at ``pos`` (length prefix included) and look for ``key`` in it.

    Returns (offset after the table, offset of the value - its type octet - of the first
    top-level entry named ``key``, or -1). Every entry is checked: fixed-width and longstr
    values are skipped inline, nested tables and arrays recurse. ``key`` None finds nothing.
    (``check_properties`` holds a copy of this loop for the headers table.)
    """
    if pos + 4 > end:
        raise errors.FrameError("field table truncated")
    table_end: int = pos + 4 + _I.unpack_from(data, pos)[0]
    if table_end > end:
        raise errors.FrameError("field table longer than its container")
    pos += 4
    sizes = VALUE_SIZES
    unpack = _I.unpack_from
    klen, wanted = (-1, b"") if key is None else (len(key), key)
    found = -1
    while pos < table_end:
        n = data[pos]
        if n == klen and found < 0 and data.startswith(wanted, pos + 1):
            found = pos + 1 + n
        pos += 1 + n  # the key
        if pos >= table_end:
            raise errors.FrameError("field table entry truncated")
        size = sizes[data[pos]]
        if size >= 0:
            pos += 1 + size
        elif size == SIZED and pos + 5 <= table_end:
            pos += 5 + unpack(data, pos + 1)[0]
        else:
            pos = _skip_value(data, pos, table_end)
    if pos != table_end:
        raise errors.FrameError("field table entry longer than the table")
    return table_end, found


# the wire type of each Basic property, in property-list order, by its bit in the first flag
# word: a shortstr (length octet + bytes), the headers table, or a fixed size in bytes
_SHORTSTR: Final = -1
_HEADERS: Final = -2
_PROPERTY_TYPES: Final = (
    (FLAG_CONTENT_TYPE, _SHORTSTR),  # content_type
    (FLAG_CONTENT_ENCODING, _SHORTSTR),  # content_encoding
    (FLAG_HEADERS, _HEADERS),  # headers
    (FLAG_DELIVERY_MODE, 1),  # delivery_mode: octet
    (FLAG_PRIORITY, 1),  # priority: octet
    (FLAG_CORRELATION_ID, _SHORTSTR),  # correlation_id
    (FLAG_REPLY_TO, _SHORTSTR),  # reply_to
    (FLAG_EXPIRATION, _SHORTSTR),  # expiration
    (0x0080, _SHORTSTR),  # message_id
    (0x0040, 8),  # timestamp: long-long
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


def check_properties(
    props: bytes, key: bytes | None = None, limits: tables.TableLimits = tables.DEFAULT_LIMITS
) -> int:
    """Raise errors.FrameError unless ``props`` is a well-formed Basic property list.

    The headers table is held to ``limits`` (406 PRECONDITION_FAILED naming the setting
    past one); nested tables and arrays are walked without recursion (``amqp.tables``).

    In the same single pass, looks for the top-level header ``key``: returns the offset of
    its value (the type octet; the first entry of that name) or -1 when there is none, so a
    caller that needs one header reads it without walking the bytes again (``header_at``).
    HOT PATH: runs once per published message whose property list is new.
    """
    end = len(props)
    if end > 1 and not props[1] & 1:
        flags = props[0] << 8 | props[1]  # one flag word: the usual case
        pos = 2
    else:
        flags, pos = _property_start(props)
    found = -1
    try:
        for kind in _LAYOUTS.get(flags) or _layout(flags):
            if kind == _SHORTSTR:
                pos += 1 + props[pos]
            elif kind != _HEADERS:
                pos += kind
            else:  # _walk_table inlined: the headers table is the bulk of the work
                if pos + 4 > end:
                    raise errors.FrameError("field table truncated")
                table_end = pos + 4 + _I.unpack_from(props, pos)[0]
                if table_end > end:
                    raise errors.FrameError("field table longer than its container")
                pos += 4
                sizes = VALUE_SIZES
                klen, wanted = (-1, b"") if key is None else (len(key), key)
                entries = limits.max_entries
                while pos < table_end:
                    entries -= 1
                    if entries < 0:
                        raise tables.count_error("headers", True, limits)
                    n = props[pos]
                    if n == klen and found < 0 and props.startswith(wanted, pos + 1):
                        found = pos + 1 + n
                    pos += 1 + n  # the key
                    if pos >= table_end:
                        raise errors.FrameError("field table entry truncated")
                    size = sizes[props[pos]]
                    if size >= 0:
                        pos += 1 + size
                    elif size == SIZED and pos + 5 <= table_end:
                        pos += 5 + _I.unpack_from(props, pos + 1)[0]
                    else:
                        pos = tables.skip_value(props, pos, table_end, limits, "headers", 1)
                if pos != table_end:
                    raise errors.FrameError("field table entry longer than the table")
    except IndexError:
        raise errors.FrameError("content header properties are truncated") from None
    # shortstr and key bytes are not checked for UTF-8: they are stored and sent as received
    if pos > end:
        raise errors.FrameError("content header properties are truncated")
    if pos != end:
        raise errors.FrameError("content header has bytes after its properties")
    return found


def _find_key(props: bytes, table: int, key: bytes) -> tuple[int, int] | None:
    """Locate ``key`` among the top-level entries of the table at ``table``.

    Returns (value start, entry end) of the first entry of that name, or None when absent.
    """
    table_end, value = _walk_table(props, table, len(props), key)
    if value < 0:
        return None
    return value, _skip_value(props, value, table_end)


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
                entry_start = found[0] - 1 - len(key)
                old = properties[body_start:entry_start] + properties[found[1] : table_end]
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
    parts = stream_offset_parts(properties)
    if parts is None:
        return splice_long_header(properties, STREAM_OFFSET_HEADER, offset)
    return b"".join((parts[0], _q.pack(offset), parts[1]))


def stream_offset_parts(properties: bytes) -> tuple[bytes, bytes] | None:
    """The property bytes with ``x-stream-offset`` spliced in, cut where its 8 value bytes go.

    ``before + offset as 8 signed big-endian bytes + after`` equals ``splice_long_header``'s
    result. None for what the cut does not cover (several flag words, a headers table that
    already has ``x-stream-offset``, a table longer than the bytes): splice those in full.
    The entry is appended after the table's own entries, or a table of just it is added.
    """
    flags = properties[0] << 8 | properties[1]
    if flags & 1:  # more than one flag word
        return None
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
            return None
        head = b"".join(
            (properties[:pos], _I.pack(size + 25), properties[start:table_end], STREAM_OFFSET_ENTRY)
        )
        return head, properties[table_end:]
    head = b"".join(
        (
            _H.pack(flags | FLAG_HEADERS),
            properties[2:pos],
            b"\x00\x00\x00\x19",  # table length: 1 + 15 + 1 + 8
            STREAM_OFFSET_ENTRY,
        )
    )
    return head, properties[pos:]


def _reply_to_position(properties: bytes) -> int:
    """Offset of the reply-to shortstr (its length octet), or -1 when it is not set."""
    try:
        flags, pos = _property_start(properties)
        if not flags & FLAG_REPLY_TO:
            return -1
        for bit, kind in _PROPERTY_TYPES:
            if bit == FLAG_REPLY_TO:
                break
            if not flags & bit:
                continue
            if kind == _SHORTSTR:
                pos += 1 + properties[pos]
            elif kind == _HEADERS:
                pos = _walk_table(properties, pos, len(properties), None)[0]
            else:
                pos += kind
        if pos + 1 + properties[pos] > len(properties):
            raise IndexError
    except (IndexError, struct.error):
        raise errors.FrameError("content header properties are truncated") from None
    return pos


def reply_to(properties: bytes) -> bytes | None:
    """The reply-to property's raw bytes, or None when it is not set (cold path: only a
    publish whose bytes contain the direct reply-to name gets here)."""
    pos = _reply_to_position(properties)
    if pos < 0:
        return None
    return properties[pos + 1 : pos + 1 + properties[pos]]


def replace_reply_to(properties: bytes, value: bytes) -> bytes:
    """``properties`` with the (set) reply-to property replaced by ``value`` (<= 255 bytes);
    every other byte is kept as sent."""
    pos = _reply_to_position(properties)
    if pos < 0 or len(value) > 255:
        raise ValueError("no reply-to property to replace, or a value past 255 bytes")
    after = pos + 1 + properties[pos]
    return b"".join((properties[:pos], bytes((len(value),)), value, properties[after:]))


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
        return _value(properties, *found)
    except (IndexError, struct.error, ValueError):
        raise errors.FrameError(f"cannot decode header {name!r}") from None


def header_at(properties: bytes, at: int) -> object:
    """The header value whose type octet is at ``at`` (as returned by ``check_properties``)."""
    try:
        return _value(properties, at, _skip_value(properties, at, len(properties)))
    except (IndexError, struct.error, ValueError):
        raise errors.FrameError("cannot decode header value") from None


def _value(properties: bytes, start: int, end: int) -> object:
    """Decode the field value (type octet included) in ``properties[start:end]``."""
    if properties[start] == TYPE_LONGSTR:
        raw = properties[start + 5 : end]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw  # as pamqp: a longstr that is not UTF-8 stays bytes
    value: object = tables.decode_value(properties, start, end, tables.UNLIMITED)[0]
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
        try:
            result.unmarshal(flags, properties[pos:])
        except UnicodeDecodeError:
            result = _decode_raw_shortstrs(flags, properties[pos:])
    except (struct.error, ValueError, TypeError, IndexError, OverflowError, OSError):
        raise errors.FrameError("cannot decode content properties") from None
    return result


def _decode_raw_shortstrs(flags: int, data: bytes) -> commands.Basic.Properties:
    """Decode a property list whose shortstrs are not all UTF-8 (pamqp raises on those).

    AMQP 0-9-1 types a shortstr as octets and RabbitMQ passes them through unchecked, so the
    hot path's ``check_properties`` accepts them and stores the bytes as sent; for this cold
    path's str attributes, bytes that are not UTF-8 become U+FFFD."""
    result = commands.Basic.Properties()
    pos = 0
    for name in result.__slots__:
        if flags & result.flags[name]:
            kind = getattr(type(result), "_" + name)
            value: object
            if kind == "shortstr":
                size = data[pos]
                value = data[pos + 1 : pos + 1 + size].decode("utf-8", "replace")
                consumed = 1 + size
            else:
                consumed, value = decode.by_type(data[pos:], kind)
            setattr(result, name, value)
            pos += consumed
    return result


__all__ = [
    "FLAG_CONTENT_ENCODING",
    "FLAG_CONTENT_TYPE",
    "FLAG_CORRELATION_ID",
    "FLAG_DELIVERY_MODE",
    "FLAG_EXPIRATION",
    "FLAG_HEADERS",
    "FLAG_PRIORITY",
    "FLAG_REPLY_TO",
    "STREAM_OFFSET_ENTRY",
    "STREAM_OFFSET_HEADER",
    "check_properties",
    "decode_properties",
    "delivery_fields",
    "header_at",
    "read_header",
    "replace_reply_to",
    "reply_to",
    "splice_long_header",
    "splice_stream_offset",
    "stream_offset_parts",
]
