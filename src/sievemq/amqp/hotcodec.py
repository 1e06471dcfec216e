"""Hand-written ``struct`` codecs for the frames sent or received once per message.

HOT PATH. pamqp marshals by reflection (about 14 µs for a publish), so the per-message
frames are coded here by hand and golden-tested byte for byte against pamqp
(tests/unit/test_amqp/test_codec_golden.py): Basic.Publish, Ack, Nack, Reject and content headers
in; Basic.Deliver (``encode_delivery`` and the cached ``DeliveryEncoder``), Return, Ack, Nack
and heartbeats out. Properties are never decoded here: they stay the raw bytes the publisher
sent, checked and spliced by ``sievemq.amqp.properties``. Every other method goes through
pamqp in ``sievemq.amqp.codec``.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from sievemq.amqp import errors
from sievemq.amqp.methods import (
    BASIC_ACK,
    BASIC_DELIVER,
    BASIC_NACK,
    BASIC_PUBLISH,
    BASIC_REJECT,
    BASIC_RETURN,
    CLASS_BASIC,
)
from sievemq.amqp.properties import (
    FLAG_CONTENT_ENCODING,
    FLAG_CONTENT_TYPE,
    FLAG_HEADERS,
    STREAM_OFFSET_ENTRY,
    check_properties,
    splice_stream_offset,
    stream_offset_parts,
)
from sievemq.amqp.tables import DEFAULT_LIMITS, TableLimits

# the first four bytes of a Basic.Publish method payload (class id, method id)
BASIC_PUBLISH_PREFIX: Final = struct.pack(">HH", *BASIC_PUBLISH)
# the first two bytes of a class-60 content header payload (its class id, big-endian)
BASIC_CONTENT_CLASS: Final = struct.pack(">H", CLASS_BASIC)
# bytes of a content header payload before the property flags: class, weight, body size
CONTENT_HEADER_FIELDS: Final = 12

_END: Final = b"\xce"
_HEARTBEAT: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"

_HH = struct.Struct(">HH")
_QB = struct.Struct(">QB")
_OFFSET_VALUE = struct.Struct(">q")
_METHOD_HEAD = struct.Struct(">BHIHH")  # frame head + class id + method id
_CONTENT_HEAD = struct.Struct(">BHIHHQ")  # frame head + class id + weight + body size
_BODY_HEAD = struct.Struct(">BHI")
_END_BODY_HEAD = struct.Struct(">BBHI")  # a frame's end, then the head of a body frame
_H = struct.Struct(">H")
_U32 = struct.Struct(">I")
_KEY: Final = STREAM_OFFSET_ENTRY[1:-1]  # b"x-stream-offset"
# the x-stream-offset entry with its value
_OFFSET_ENTRY = struct.Struct(f">{len(STREAM_OFFSET_ENTRY)}sq")
_ACK_FRAME = struct.Struct(">BHIHHQBB")  # a whole Basic.Ack / Nack frame, frame end included
_REPLY_CODE = struct.Struct(">H")
_CONTENT_FIELDS = struct.Struct(">HHQ")


class BasicPublish(NamedTuple):
    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool


class BasicAck(NamedTuple):
    delivery_tag: int
    multiple: bool


class BasicNack(NamedTuple):
    delivery_tag: int
    multiple: bool
    requeue: bool


class BasicReject(NamedTuple):
    delivery_tag: int
    requeue: bool


class ContentHeader(NamedTuple):
    class_id: int
    body_size: int
    properties: bytes  # property flags + property list, exactly as sent


_new = tuple.__new__  # a NamedTuple without its generated ``__new__`` call (hot path)

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


def decode_basic_publish(payload: bytes) -> BasicPublish:
    """Basic.Publish payload -> (exchange, routing_key, mandatory, immediate)."""
    try:
        end = 7 + payload[6]
        exchange = payload[7:end].decode("utf-8")
        rk_end = end + 1 + payload[end]
        routing_key = payload[end + 1 : rk_end].decode("utf-8")
        bits = payload[rk_end]
    except (IndexError, UnicodeDecodeError):
        raise errors.FrameError("cannot decode basic.publish", *BASIC_PUBLISH) from None
    return _new(BasicPublish, (exchange, routing_key, bool(bits & 1), bool(bits & 2)))


def decode_basic_ack(payload: bytes) -> BasicAck:
    """Basic.Ack payload -> (delivery_tag, multiple)."""
    try:
        tag, bits = _QB.unpack_from(payload, 4)
    except struct.error:
        raise errors.FrameError("cannot decode basic.ack", *BASIC_ACK) from None
    return _new(BasicAck, (tag, bool(bits & 1)))


def decode_basic_nack(payload: bytes) -> BasicNack:
    """Basic.Nack payload -> (delivery_tag, multiple, requeue)."""
    try:
        tag, bits = _QB.unpack_from(payload, 4)
    except struct.error:
        raise errors.FrameError("cannot decode basic.nack", *BASIC_NACK) from None
    return _new(BasicNack, (tag, bool(bits & 1), bool(bits & 2)))


def decode_basic_reject(payload: bytes) -> BasicReject:
    """Basic.Reject payload -> (delivery_tag, requeue)."""
    try:
        tag, bits = _QB.unpack_from(payload, 4)
    except struct.error:
        raise errors.FrameError("cannot decode basic.reject", *BASIC_REJECT) from None
    return _new(BasicReject, (tag, bool(bits & 1)))


def decode_content_header(payload: bytes, limits: TableLimits = DEFAULT_LIMITS) -> ContentHeader:
    """Content header payload -> (class_id, body_size, raw properties).

    The raw properties are the property flags and property list exactly as sent; their
    structure is checked by ``properties.check_properties`` (FrameError when malformed).
    """
    try:
        class_id, _weight, body_size = _CONTENT_FIELDS.unpack_from(payload)
    except struct.error:
        raise errors.FrameError("content header shorter than 14 bytes") from None
    properties = payload[CONTENT_HEADER_FIELDS:]
    check_properties(properties, None, limits)  # the headers table held to ``limits`` (406)
    return _new(ContentHeader, (class_id, body_size, properties))


# ---------------------------------------------------------------------------------------------
# encoding: hot frames


def encode_basic_ack(channel: int, tag: int, multiple: bool) -> bytes:
    """A whole Basic.Ack frame (publisher confirm)."""
    return _ACK_FRAME.pack(1, channel, 13, *BASIC_ACK, tag, 1 if multiple else 0, 0xCE)


def encode_basic_nack(channel: int, tag: int, multiple: bool, requeue: bool = False) -> bytes:
    """A whole Basic.Nack frame (negative publisher confirm; requeue is meaningless there)."""
    bits = (1 if multiple else 0) | (2 if requeue else 0)
    return _ACK_FRAME.pack(1, channel, 13, *BASIC_NACK, tag, bits, 0xCE)


def encode_heartbeat() -> bytes:
    """A whole heartbeat frame."""
    return _HEARTBEAT


def _content(
    out: list[bytes], channel: int, properties: bytes, body: bytes, frame_max: int
) -> list[bytes]:
    """Append the content header frame and the body frames to ``out``."""
    size = len(body)
    out.append(_CONTENT_HEAD.pack(2, channel, 12 + len(properties), CLASS_BASIC, 0, size))
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


# public name of the content encoder (classic-queue deliveries and get-ok use it too)
encode_content = _content

# a content header frame around its property bytes: type, channel, size (7), class id,
# weight, body size (12) and the frame end (1)
HEADER_FRAME_OVERHEAD: Final = 20


class HeaderTooLarge(ValueError):
    """A message whose content header cannot fit the consumer's frame_max at all.

    A content header is one frame (AMQP 0-9-1 §4.2.6: it cannot be split), so such a
    message cannot be delivered on this connection.
    """

    def __init__(self, header_frame: int, frame_max: int) -> None:
        super().__init__(
            f"content header frame of {header_frame} bytes exceeds the negotiated"
            f" frame_max {frame_max}"
        )
        self.header_frame = header_frame
        self.frame_max = frame_max


def fitted_properties(properties: bytes, offset: int, frame_max: int) -> bytes:
    """A stream delivery's property bytes: ``x-stream-offset`` spliced in when its header
    frame stays within ``frame_max``; else as published, when that fits; else HeaderTooLarge.

    The splice adds up to 29 bytes (25 for the entry, 4 for a new headers table), so a
    header the publisher filled to its own frame_max would be 29 bytes over a consumer
    with the same frame_max. RabbitMQ sends such a frame anyway; clients that check the
    frame size (amqplib) then drop the connection. SieveMQ omits the header instead.
    """
    room = frame_max - HEADER_FRAME_OVERHEAD
    spliced = splice_stream_offset(properties, offset)
    if len(spliced) <= room:
        return spliced
    if len(properties) <= room:
        return properties
    raise HeaderTooLarge(len(properties) + HEADER_FRAME_OVERHEAD, frame_max)


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
    split over several body frames; the header frame never exceeds ``frame_max``
    (``fitted_properties``: the offset is left out when it would not fit).
    """
    props = fitted_properties(properties, offset, frame_max)
    ct = encode_shortstr(consumer_tag)
    ex = encode_shortstr(exchange)
    rk = encode_shortstr(routing_key)
    out = [
        _METHOD_HEAD.pack(1, channel, 13 + len(ct) + len(ex) + len(rk), *BASIC_DELIVER),
        ct,
        _QB.pack(delivery_tag, 0),
        ex,
        rk,
        _END,
    ]
    return _content(out, channel, props, body, frame_max)


_SPLICE_CACHE_MAX: Final = 1024
# misses after which the property cache is emptied and learns again (what a consumer reads
# may change from unique property lists to a few repeated ones)
_RELEARN_AFTER: Final = 8 * _SPLICE_CACHE_MAX
# the x-stream-offset entry: its length in a headers table (key length, key, type, value)
_ENTRY_SIZE: Final = len(STREAM_OFFSET_ENTRY) + 8
_NEW_TABLE_SIZE: Final = struct.pack(">I", _ENTRY_SIZE)  # a table of just that entry


# The encoder's cached pieces are plain tuples, unpacked into named locals where used: a
# NamedTuple's attribute reads cost about 0.1 µs per delivery here (CPython 3.11).
# A Basic.Deliver frame cut around its delivery tag: (frame head + class/method ids +
# consumer tag, the redelivered octet + exchange + routing key + frame end).
# The third part packs both and the tag, then the content header frame's head, in one go:
# (head, tag, after_tag, type 2, channel, size, class, weight, body size).
_DeliverParts = tuple[bytes, bytes, struct.Struct]
# Property bytes with x-stream-offset spliced in, cut around its 8 value bytes:
# (bytes before the value, bytes after it, length of the whole spliced property bytes).
_SplicedProperties = tuple[bytes, bytes, int]


class DeliveryEncoder:
    """Basic.Deliver + header + body for one consumer, byte-identical to ``encode_delivery``.

    HOT PATH. The parts that repeat from one delivery to the next are encoded once and
    cached: the method frame around the delivery tag per (exchange, routing key), and the
    property bytes around the spliced ``x-stream-offset`` value per distinct property list.
    Property lists that do not repeat (a message id, a timestamp or a sequence header of
    their own: loadgen's ``-unique-props``) would only churn that cache: after
    ``_SPLICE_CACHE_MAX`` misses the encoder stops adding to it and splices a missed
    property list straight into the output pieces (no joined copy, no cache entry), and
    after ``_RELEARN_AFTER`` more misses it empties the cache and learns again.
    ``encode`` appends the pieces to ``out``; the caller joins or writes them in one go.
    """

    __slots__ = ("_channel", "_ctag", "_limit", "_method", "_misses", "_props", "frame_max")

    def __init__(self, channel: int, consumer_tag: str, frame_max: int) -> None:
        self._channel = channel
        self._ctag = encode_shortstr(consumer_tag)
        self.frame_max = frame_max
        self._limit = frame_max - 8
        self._method: dict[tuple[str, str], _DeliverParts] = {}
        self._props: dict[bytes, _SplicedProperties] = {}
        self._misses = 0

    def _method_parts(self, exchange: str, routing_key: str) -> _DeliverParts:
        ex = encode_shortstr(exchange)
        rk = encode_shortstr(routing_key)
        ct = self._ctag
        size = 13 + len(ct) + len(ex) + len(rk)
        head = _METHOD_HEAD.pack(1, self._channel, size, *BASIC_DELIVER) + ct
        after_tag = b"\x00" + ex + rk + _END
        parts = (head, after_tag, struct.Struct(f">{len(head)}sQ{len(after_tag)}sBHIHHQ"))
        if len(self._method) >= _SPLICE_CACHE_MAX:
            self._method.clear()
        self._method[exchange, routing_key] = parts
        return parts

    def _props_parts(self, properties: bytes) -> _SplicedProperties | None:
        """The spliced properties cut around the offset value (None: splice in full, or the
        spliced header would exceed frame_max: ``fitted_properties`` decides each time)."""
        cut = stream_offset_parts(properties)
        if cut is None:
            return None
        before, after = cut
        parts = (before, after, len(before) + 8 + len(after))
        if parts[2] + HEADER_FRAME_OVERHEAD > self.frame_max:
            return None
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
        """Append the frames of one delivery to ``out`` (nothing if HeaderTooLarge is raised)."""
        method = self._method.get((exchange, routing_key))
        if method is None:
            method = self._method_parts(exchange, routing_key)
        head, after_tag, deliver = method
        size = len(body)
        ch = self._channel
        # no lookup while the cache only misses (the property lists do not repeat)
        props = self._props.get(properties) if self._misses <= _SPLICE_CACHE_MAX else None
        if props is None and size and size <= self._limit:
            misses = self._misses = self._misses + 1
            if misses <= _SPLICE_CACHE_MAX:
                props = self._props_parts(properties)  # learning: into the cache
            else:
                if misses >= _RELEARN_AFTER:
                    self._misses = 0
                    self._props.clear()
                # stream_offset_parts without the copy: the spliced property bytes go out
                # as slices of the stored ones around the table length and the new entry
                flags = properties[0] << 8 | properties[1]
                if not flags & 1:  # one flag word (else: the general path below)
                    pos = 2
                    if flags & FLAG_CONTENT_TYPE:
                        pos += 1 + properties[pos]
                    if flags & FLAG_CONTENT_ENCODING:
                        pos += 1 + properties[pos]
                    plen = len(properties)
                    if flags & FLAG_HEADERS:  # the entry goes at the end of the table
                        table = pos + 4
                        table_end = table + _U32.unpack_from(properties, pos)[0]
                        spliced = plen + _ENTRY_SIZE
                        if table_end > plen or properties.find(_KEY, table, table_end) >= 0:
                            table_end = -1  # the general path below
                            lead = grown = entries = b""
                        else:
                            lead = properties[:pos]
                            grown = _U32.pack(table_end - table + _ENTRY_SIZE)
                            entries = properties[table:table_end]
                    else:  # a table of just the entry goes where the flag says
                        table_end = pos
                        lead = _H.pack(flags | FLAG_HEADERS) + properties[2:pos]
                        grown = _NEW_TABLE_SIZE
                        entries = b""
                        spliced = plen + 4 + _ENTRY_SIZE
                    if table_end >= 0 and spliced + HEADER_FRAME_OVERHEAD <= self.frame_max:
                        out += (
                            deliver.pack(
                                head,
                                delivery_tag,
                                after_tag,
                                2,
                                ch,
                                12 + spliced,
                                CLASS_BASIC,
                                0,
                                size,
                            ),
                            lead,
                            grown,
                            entries,
                            _OFFSET_ENTRY.pack(STREAM_OFFSET_ENTRY, offset),
                            properties[table_end:],
                            _END_BODY_HEAD.pack(0xCE, 3, ch, size),
                            body,
                            _END,
                        )
                        return
        if props is None or size > self._limit or not size:
            fitted = fitted_properties(properties, offset, self.frame_max)
            out += (head, _QB.pack(delivery_tag, 0), after_tag[1:])  # redelivered: in _QB
            _content(out, ch, fitted, body, self.frame_max)
            return
        before_value, after_value, props_size = props
        out += (
            # the tag; after_tag starts with the redelivered octet
            deliver.pack(
                head, delivery_tag, after_tag, 2, ch, 12 + props_size, CLASS_BASIC, 0, size
            ),
            before_value,
            _OFFSET_VALUE.pack(offset),
            after_value,
            _END_BODY_HEAD.pack(0xCE, 3, ch, size),
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
        _METHOD_HEAD.pack(1, channel, 7 + len(text) + len(ex) + len(rk), *BASIC_RETURN),
        _REPLY_CODE.pack(reply_code),
        bytes((len(text),)),
        text,
        ex,
        rk,
        _END,
    ]
    return _content(out, channel, properties, body, frame_max)


__all__ = [
    "BASIC_CONTENT_CLASS",
    "BASIC_PUBLISH_PREFIX",
    "CONTENT_HEADER_FIELDS",
    "BasicAck",
    "BasicNack",
    "BasicPublish",
    "BasicReject",
    "ContentHeader",
    "DeliveryEncoder",
    "decode_basic_ack",
    "decode_basic_nack",
    "decode_basic_publish",
    "decode_basic_reject",
    "decode_content_header",
    "encode_basic_ack",
    "encode_basic_nack",
    "encode_delivery",
    "encode_heartbeat",
    "encode_return",
    "encode_shortstr",
    "method_id",
]
