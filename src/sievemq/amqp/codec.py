"""Method and content codecs: hand-written ``struct`` code for the per-message frames.

HOT PATH. pamqp marshals by reflection (about 14 µs for a publish), so the frames sent or
received once per message are coded here by hand and golden-tested byte for byte against
pamqp (tests/test_amqp): Basic.Publish, Ack, Nack, Reject in; Basic.Deliver, Return, Ack,
Nack out; content headers both ways. Properties stay the raw bytes the publisher sent
(property flags + property list); only ``x-stream-offset`` is spliced into them on delivery,
and the headers table is decoded only when a caller needs a header that is really there.
Every cold method goes through pamqp (``decode_method`` / ``encode_method``).
"""

from __future__ import annotations

import struct
from typing import Final

from pamqp import base, commands, frame

from sievemq.amqp import errors, tables

CLASS_BASIC: Final = 60
BASIC_PUBLISH: Final = (60, 40)
BASIC_RETURN: Final = (60, 50)
BASIC_DELIVER: Final = (60, 60)
BASIC_ACK: Final = (60, 80)
BASIC_REJECT: Final = (60, 90)
BASIC_NACK: Final = (60, 120)

FLAG_CONTENT_TYPE: Final = 0x8000
FLAG_CONTENT_ENCODING: Final = 0x4000
FLAG_HEADERS: Final = 0x2000

STREAM_OFFSET_HEADER: Final = "x-stream-offset"

_END: Final = b"\xce"
_HEARTBEAT: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"

_HH = struct.Struct(">HH")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_QB = struct.Struct(">QB")
_q = struct.Struct(">q")
_METHOD_HEAD = struct.Struct(">BHIHH")  # frame head + class id + method id
_CONTENT_HEAD = struct.Struct(">BHIHHQ")  # frame head + class id + weight + body size
_BODY_HEAD = struct.Struct(">BHI")
_ACK_FRAME = struct.Struct(">BHIHHQBB")  # a whole Basic.Ack / Nack frame, frame end included
_REPLY_CODE = struct.Struct(">H")
_CONTENT_FIELDS = struct.Struct(">HHQ")

# ---------------------------------------------------------------------------------------------
# shortstr encoding, cached: consumer tags, exchanges and routing keys repeat on every delivery

_SHORTSTR_CACHE: dict[str, bytes] = {}
_SHORTSTR_CACHE_MAX: Final = 8192


def encode_shortstr(value: str) -> bytes:
    """Length octet + UTF-8 bytes; ValueError above 255 bytes. Cached for repeated names."""
    cached = _SHORTSTR_CACHE.get(value)
    if cached is not None:
        return cached
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise ValueError(f"shortstr longer than 255 bytes: {len(raw)}")
    encoded = bytes((len(raw),)) + raw
    if len(_SHORTSTR_CACHE) >= _SHORTSTR_CACHE_MAX:
        _SHORTSTR_CACHE.clear()
    _SHORTSTR_CACHE[value] = encoded
    return encoded


# ---------------------------------------------------------------------------------------------
# decoding: hot methods


def method_id(payload: bytes) -> tuple[int, int]:
    """(class_id, method_id) of a method frame payload."""
    try:
        class_id, mid = _HH.unpack_from(payload)
    except struct.error:
        raise errors.FrameError("method frame shorter than 4 bytes") from None
    return class_id, mid


def decode_basic_publish(payload: bytes) -> tuple[str, str, bool, bool]:
    """Basic.Publish payload -> (exchange, routing_key, mandatory, immediate)."""
    try:
        end = 7 + payload[6]
        exchange = payload[7:end].decode("utf-8")
        rk_end = end + 1 + payload[end]
        routing_key = payload[end + 1 : rk_end].decode("utf-8")
        bits = payload[rk_end]
    except (IndexError, UnicodeDecodeError):
        raise errors.FrameError("cannot decode basic.publish", *BASIC_PUBLISH) from None
    return exchange, routing_key, bool(bits & 1), bool(bits & 2)


def decode_basic_ack(payload: bytes) -> tuple[int, bool]:
    """Basic.Ack payload -> (delivery_tag, multiple)."""
    try:
        tag, bits = _QB.unpack_from(payload, 4)
    except struct.error:
        raise errors.FrameError("cannot decode basic.ack", *BASIC_ACK) from None
    return tag, bool(bits & 1)


def decode_basic_nack(payload: bytes) -> tuple[int, bool, bool]:
    """Basic.Nack payload -> (delivery_tag, multiple, requeue)."""
    try:
        tag, bits = _QB.unpack_from(payload, 4)
    except struct.error:
        raise errors.FrameError("cannot decode basic.nack", *BASIC_NACK) from None
    return tag, bool(bits & 1), bool(bits & 2)


def decode_basic_reject(payload: bytes) -> tuple[int, bool]:
    """Basic.Reject payload -> (delivery_tag, requeue)."""
    try:
        tag, bits = _QB.unpack_from(payload, 4)
    except struct.error:
        raise errors.FrameError("cannot decode basic.reject", *BASIC_REJECT) from None
    return tag, bool(bits & 1)


def decode_content_header(
    payload: bytes, limits: tables.TableLimits = tables.DEFAULT_LIMITS
) -> tuple[int, int, bytes]:
    """Content header payload -> (class_id, body_size, raw properties).

    The raw properties are the property flags and property list exactly as sent. Their
    structure is checked here (every length stays inside the frame, every table value has a
    known type) so what is stored can always be delivered and decoded later.
    """
    try:
        class_id, _weight, body_size = _CONTENT_FIELDS.unpack_from(payload)
    except struct.error:
        raise errors.FrameError("content header shorter than 14 bytes") from None
    properties = payload[12:]
    check_properties(properties, limits)
    return class_id, body_size, properties


# ---------------------------------------------------------------------------------------------
# raw property bytes: walking without building objects


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

    The headers table is held to ``limits`` (406 PRECONDITION_FAILED past one)."""
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
_OFFSET_ENTRY: Final = b"\x0fx-stream-offsetl"


def _splice_offset(properties: bytes, offset: int) -> bytes:
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
                _OFFSET_ENTRY,
                _q.pack(offset),
                properties[table_end:],
            )
        )
    return b"".join(
        (
            _H.pack(flags | FLAG_HEADERS),
            properties[2:pos],
            b"\x00\x00\x00\x19",  # table length: 1 + 15 + 1 + 8
            _OFFSET_ENTRY,
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


# ---------------------------------------------------------------------------------------------
# encoding: hot frames


def encode_basic_ack(channel: int, tag: int, multiple: bool) -> bytes:
    """A whole Basic.Ack frame (publisher confirm)."""
    return _ACK_FRAME.pack(1, channel, 13, 60, 80, tag, 1 if multiple else 0, 0xCE)


def encode_basic_nack(channel: int, tag: int, multiple: bool, requeue: bool = False) -> bytes:
    """A whole Basic.Nack frame (negative publisher confirm; requeue is meaningless there)."""
    bits = (1 if multiple else 0) | (2 if requeue else 0)
    return _ACK_FRAME.pack(1, channel, 13, 60, 120, tag, bits, 0xCE)


def _content(
    out: list[bytes], channel: int, properties: bytes, body: bytes, frame_max: int
) -> list[bytes]:
    """Append the content header frame and the body frames to ``out``."""
    size = len(body)
    out.append(_CONTENT_HEAD.pack(2, channel, 12 + len(properties), 60, 0, size))
    out.append(properties)
    limit = frame_max - 8
    if size <= limit:
        if size:
            out += (_END, _BODY_HEAD.pack(3, channel, size), body, _END)
        else:
            out.append(_END)
        return out
    out.append(_END)
    view = memoryview(body)
    for start in range(0, size, limit):
        chunk = view[start : start + limit]
        out += (_BODY_HEAD.pack(3, channel, len(chunk)), bytes(chunk), _END)
    return out


def encode_delivery(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    exchange: str,
    routing_key: str,
    properties: bytes,
    body: bytes,
    frame_max: int,
    offset: int,
) -> list[bytes]:
    """Basic.Deliver + content header (with ``x-stream-offset`` spliced in) + body frames.

    Returns the pieces for ``transport.writelines``; bodies larger than ``frame_max - 8`` are
    split over several body frames.
    """
    ct = encode_shortstr(consumer_tag)
    ex = encode_shortstr(exchange)
    rk = encode_shortstr(routing_key)
    out = [
        _METHOD_HEAD.pack(1, channel, 13 + len(ct) + len(ex) + len(rk), 60, 60),
        ct,
        _QB.pack(delivery_tag, 0),
        ex,
        rk,
        _END,
    ]
    return _content(out, channel, _splice_offset(properties, offset), body, frame_max)


_Q = struct.Struct(">Q")
_OFFSET_VALUE = struct.Struct(">q")
_SPLICE_CACHE_MAX: Final = 1024


class DeliveryEncoder:
    """Basic.Deliver + header + body for one consumer, byte-identical to ``encode_delivery``.

    HOT PATH. The parts that repeat from one delivery to the next are encoded once and
    cached: the method frame around the delivery tag per (exchange, routing key), and the
    property bytes around the spliced ``x-stream-offset`` value per distinct property list.
    ``encode`` appends the pieces to ``out``; the caller joins or writes them in one go.
    """

    __slots__ = ("_channel", "_ctag", "_limit", "_method", "_props", "frame_max")

    def __init__(self, channel: int, consumer_tag: str, frame_max: int) -> None:
        self._channel = channel
        self._ctag = encode_shortstr(consumer_tag)
        self.frame_max = frame_max
        self._limit = frame_max - 8
        self._method: dict[tuple[str, str], tuple[bytes, bytes]] = {}
        self._props: dict[bytes, tuple[bytes, bytes, int]] = {}

    def _method_parts(self, exchange: str, routing_key: str) -> tuple[bytes, bytes]:
        ex = encode_shortstr(exchange)
        rk = encode_shortstr(routing_key)
        ct = self._ctag
        size = 13 + len(ct) + len(ex) + len(rk)
        parts = (_METHOD_HEAD.pack(1, self._channel, size, 60, 60) + ct, b"\x00" + ex + rk + _END)
        if len(self._method) >= _SPLICE_CACHE_MAX:
            self._method.clear()
        self._method[exchange, routing_key] = parts
        return parts

    def _props_parts(self, properties: bytes) -> tuple[bytes, bytes, int] | None:
        """(bytes before the offset value, bytes after it, spliced length), if it splits."""
        probe = _splice_offset(properties, 0)
        mark = _OFFSET_ENTRY + _OFFSET_VALUE.pack(0)
        at = probe.rfind(mark)
        if at < 0 or probe.find(mark) != at:
            return None
        cut = at + len(_OFFSET_ENTRY)
        parts = (probe[:cut], probe[cut + 8 :], len(probe))
        if len(self._props) >= _SPLICE_CACHE_MAX:
            self._props.clear()
        self._props[properties] = parts
        return parts

    def encode(
        self,
        out: list[bytes],
        delivery_tag: int,
        exchange: str,
        routing_key: str,
        properties: bytes,
        body: bytes,
        offset: int,
    ) -> None:
        """Append the frames of one delivery to ``out``."""
        method = self._method.get((exchange, routing_key))
        if method is None:
            method = self._method_parts(exchange, routing_key)
        props = self._props.get(properties)
        if props is None:
            props = self._props_parts(properties)
        size = len(body)
        if props is None or size > self._limit or not size:
            out.append(method[0])
            out.append(_QB.pack(delivery_tag, 0))
            out.append(method[1][1:])
            _content(out, self._channel, _splice_offset(properties, offset), body, self.frame_max)
            return
        ch = self._channel
        out += (
            method[0],
            _Q.pack(delivery_tag),
            method[1],
            _CONTENT_HEAD.pack(2, ch, 12 + props[2], 60, 0, size),
            props[0],
            _OFFSET_VALUE.pack(offset),
            props[1],
            _END,
            _BODY_HEAD.pack(3, ch, size),
            body,
            _END,
        )


def encode_return(
    channel: int,
    reply_code: int,
    reply_text: str,
    exchange: str,
    routing_key: str,
    properties: bytes,
    body: bytes,
    frame_max: int,
) -> list[bytes]:
    """Basic.Return + content header (properties as published) + body frames."""
    text = reply_text.encode("utf-8")[:255]
    ex = encode_shortstr(exchange)
    rk = encode_shortstr(routing_key)
    out = [
        _METHOD_HEAD.pack(1, channel, 7 + len(text) + len(ex) + len(rk), 60, 50),
        _REPLY_CODE.pack(reply_code),
        bytes((len(text),)),
        text,
        ex,
        rk,
        _END,
    ]
    return _content(out, channel, properties, body, frame_max)


# ---------------------------------------------------------------------------------------------
# cold path: pamqp


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
    to ``limits`` (406 past one), and pamqp decodes the rest with the table cut out.
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


def encode_method(channel: int, method: base.Frame) -> bytes:
    """A whole method frame for a pamqp command object."""
    return frame.marshal(method, channel)


def encode_heartbeat() -> bytes:
    """A whole heartbeat frame."""
    return _HEARTBEAT


__all__ = [
    "STREAM_OFFSET_HEADER",
    "DeliveryEncoder",
    "check_properties",
    "decode_basic_ack",
    "decode_basic_nack",
    "decode_basic_publish",
    "decode_basic_reject",
    "decode_content_header",
    "decode_method",
    "decode_properties",
    "encode_basic_ack",
    "encode_basic_nack",
    "encode_delivery",
    "encode_heartbeat",
    "encode_method",
    "encode_return",
    "encode_shortstr",
    "method_id",
    "read_header",
    "splice_long_header",
]
