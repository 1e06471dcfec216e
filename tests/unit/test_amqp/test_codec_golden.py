"""Golden tests: every hand-written codec equals pamqp byte for byte, over random inputs."""

from __future__ import annotations

import struct
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands, frame, header

from sievemq.amqp import codec, frames, hotcodec
from sievemq.amqp import properties as raw_properties

from .strategies import (
    channel_id,
    delivery_tag,
    exchange_name,
    pamqp_tag,
    properties,
    shortstr,
)

FRAME_MAX = st.integers(4096, 131072) | st.just(4096)
BODY = st.binary(max_size=300) | st.binary(min_size=4000, max_size=20000)


def method_payload(method: commands.base.Frame) -> bytes:
    """The payload of the method frame pamqp marshals for ``method``."""
    return frame.marshal(method, 1)[7:-1]


def ss(text: str) -> bytes:
    raw = text.encode("utf-8")
    return bytes((len(raw),)) + raw


def pamqp_content(channel: int, props: commands.Basic.Properties, body: bytes, fmax: int) -> bytes:
    """Content header + body frames as pamqp marshals them, split at frame_max - 8."""
    out = [frame.marshal(header.ContentHeader(0, len(body), props), channel)]
    step = fmax - 8
    out += [
        frame.marshal(pbody.ContentBody(body[i : i + step]), channel)
        for i in range(0, len(body), step)
    ]
    return b"".join(out)


@given(exchange_name, shortstr, st.booleans(), st.booleans())
def test_decode_publish_matches_pamqp(exchange: str, rk: str, mandatory: bool, immediate: bool):
    payload = method_payload(commands.Basic.Publish(0, exchange, rk, mandatory, immediate))
    pm = frame._unmarshal_method_frame(payload)
    assert hotcodec.method_id(payload) == (60, 40)
    assert hotcodec.decode_basic_publish(payload) == (
        pm.exchange,
        pm.routing_key,
        pm.mandatory,
        pm.immediate,
    )
    assert pm.exchange == exchange and pm.routing_key == rk


@given(shortstr, shortstr, st.integers(0, 255))
def test_decode_publish_unicode_names_match_pamqp(exchange: str, rk: str, bits: int):
    # pamqp refuses to marshal such exchange names, but decodes them: build the bytes by hand
    payload = b"\x00\x3c\x00\x28\x00\x00" + ss(exchange) + ss(rk) + bytes((bits,))
    pm = frame._unmarshal_method_frame(payload)
    assert hotcodec.decode_basic_publish(payload) == (exchange, rk, pm.mandatory, pm.immediate)


@given(pamqp_tag, st.booleans())
def test_decode_ack_matches_pamqp(tag: int, multiple: bool):
    payload = method_payload(commands.Basic.Ack(tag, multiple))
    assert hotcodec.method_id(payload) == (60, 80)
    assert hotcodec.decode_basic_ack(payload) == (tag, multiple)


@given(pamqp_tag, st.booleans(), st.booleans())
def test_decode_nack_matches_pamqp(tag: int, multiple: bool, requeue: bool):
    payload = method_payload(commands.Basic.Nack(tag, multiple, requeue))
    assert hotcodec.method_id(payload) == (60, 120)
    assert hotcodec.decode_basic_nack(payload) == (tag, multiple, requeue)


@given(pamqp_tag, st.booleans())
def test_decode_reject_matches_pamqp(tag: int, requeue: bool):
    payload = method_payload(commands.Basic.Reject(tag, requeue))
    assert hotcodec.method_id(payload) == (60, 90)
    assert hotcodec.decode_basic_reject(payload) == (tag, requeue)


@given(channel_id, pamqp_tag, st.booleans())
def test_encode_ack_is_pamqp_bytes(channel: int, tag: int, multiple: bool):
    assert hotcodec.encode_basic_ack(channel, tag, multiple) == frame.marshal(
        commands.Basic.Ack(tag, multiple), channel
    )


@given(channel_id, pamqp_tag, st.booleans(), st.booleans())
def test_encode_nack_is_pamqp_bytes(channel: int, tag: int, multiple: bool, requeue: bool):
    assert hotcodec.encode_basic_nack(channel, tag, multiple, requeue) == frame.marshal(
        commands.Basic.Nack(tag, multiple, requeue), channel
    )
    assert hotcodec.encode_basic_nack(channel, tag, multiple) == frame.marshal(
        commands.Basic.Nack(tag, multiple, False), channel
    )


@given(properties(), st.integers(0, 2**64 - 1))
def test_decode_content_header_matches_pamqp(props: commands.Basic.Properties, size: int):
    payload = frame.marshal(header.ContentHeader(0, size, props), 1)[7:-1]
    class_id, body_size, raw = hotcodec.decode_content_header(payload)
    theirs = frame._unmarshal_header_frame(payload)
    assert (class_id, body_size) == (theirs.class_id, theirs.body_size) == (60, size)
    assert raw == props.marshal()
    assert raw_properties.decode_properties(raw) == theirs.properties == props


@given(
    channel_id,
    shortstr,
    pamqp_tag,
    exchange_name,
    shortstr,
    properties(),
    BODY,
    FRAME_MAX,
    st.integers(0, 2**63 - 1),
)
def test_encode_delivery_matches_pamqp(
    channel: int,
    ctag: str,
    tag: int,
    exchange: str,
    rk: str,
    props: commands.Basic.Properties,
    body: bytes,
    fmax: int,
    offset: int,
):
    raw = props.marshal()
    data = b"".join(
        hotcodec.encode_delivery(channel, ctag, tag, exchange, rk, raw, body, fmax, offset)
    )
    method = frame.marshal(commands.Basic.Deliver(ctag, tag, False, exchange, rk), channel)
    assert data.startswith(method)
    # the header frame carries the spliced properties; the body frames are pamqp's
    spliced = raw_properties.splice_long_header(raw, "x-stream-offset", offset)
    content_head = struct.pack(">BHIHHQ", 2, channel, 12 + len(spliced), 60, 0, len(body))
    rest = data[len(method) :]
    assert rest.startswith(content_head + spliced + b"\xce")
    expected_bodies = pamqp_content(channel, props, body, fmax)
    expected_bodies = expected_bodies[7 + 12 + len(raw) + 1 :]
    assert rest[len(content_head) + len(spliced) + 1 :] == expected_bodies
    # and pamqp reads the whole delivery back as what was meant
    pos, seen = 0, []
    while pos < len(data):
        used, ch, parsed = frame.unmarshal(data[pos:])
        assert ch == channel
        seen.append(parsed)
        pos += used
    assert seen[1].body_size == len(body)
    headers = dict(props.headers or {})
    headers["x-stream-offset"] = offset
    assert seen[1].properties.headers == headers
    assert b"".join(b.value for b in seen[2:]) == body
    assert all(len(b.value) <= fmax - 8 for b in seen[2:])


@given(
    channel_id,
    st.sampled_from([312, 313]),
    shortstr,
    exchange_name,
    shortstr,
    properties(),
    BODY,
    FRAME_MAX,
)
def test_encode_return_is_pamqp_bytes(
    channel: int,
    code: int,
    text: str,
    exchange: str,
    rk: str,
    props: commands.Basic.Properties,
    body: bytes,
    fmax: int,
):
    ours = b"".join(
        hotcodec.encode_return(channel, code, text, exchange, rk, props.marshal(), body, fmax)
    )
    theirs = frame.marshal(
        commands.Basic.Return(code, text, exchange, rk), channel
    ) + pamqp_content(channel, props, body, fmax)
    assert ours == theirs


@given(properties())
def test_frames_from_encoders_pass_the_frame_reader(props: commands.Basic.Properties):
    pieces = hotcodec.encode_delivery(1, "c", 1, "", "rk", props.marshal(), b"x" * 9000, 4096, 7)
    parsed = frames.FrameReader(4096, 8192).feed(b"".join(pieces))
    assert [t for t, _, _ in parsed] == [1, 2, 3, 3, 3]


def test_heartbeat_is_pamqp_bytes():
    from pamqp import heartbeat

    assert hotcodec.encode_heartbeat() == frame.marshal(heartbeat.Heartbeat(), 0)


@given(channel_id, exchange_name, st.booleans(), st.integers(0, 65535))
def test_cold_methods_roundtrip_through_pamqp(channel: int, name: str, flag: bool, count: int):
    method = commands.Queue.DeclareOk(name, count, count)
    data = codec.encode_method(channel, method)
    assert data == frame.marshal(method, channel)
    parsed = codec.decode_method(data[7:-1])
    assert isinstance(parsed, commands.Queue.DeclareOk)
    assert (parsed.queue, parsed.message_count) == (name, count)
    consume = commands.Basic.Consume(0, "q", name, flag, not flag, flag, False, {"x": count})
    back = codec.decode_method(codec.encode_method(channel, consume)[7:-1])
    assert (back.consumer_tag, back.no_ack, back.arguments) == (name, not flag, {"x": count})


@given(channel_id, delivery_tag, st.booleans(), st.booleans())
def test_tags_up_to_2_64_are_unsigned_on_the_wire(
    channel: int, tag: int, multiple: bool, requeue: bool
):
    # beyond pamqp's signed range: the bytes follow the spec's unsigned longlong
    bits = int(multiple) | int(requeue) << 1
    payload = struct.pack(">HHQB", 60, 120, tag, bits)
    assert hotcodec.decode_basic_nack(payload) == (tag, multiple, requeue)
    assert hotcodec.decode_basic_ack(struct.pack(">HHQB", 60, 80, tag, bits)) == (tag, multiple)
    assert hotcodec.decode_basic_reject(struct.pack(">HHQB", 60, 90, tag, bits)) == (tag, multiple)
    frame_bytes = hotcodec.encode_basic_nack(channel, tag, multiple, requeue)
    assert frame_bytes == struct.pack(">BHI", 1, channel, 13) + payload + b"\xce"
    pieces = hotcodec.encode_delivery(channel, "ct", tag, "ex", "rk", b"\x00\x00", b"", 4096, 0)
    method = frames.FrameReader(4096, 4096).feed(b"".join(pieces))[0][2]
    assert struct.unpack_from(">Q", method, 4 + 3) == (tag,)


@given(
    channel_id,
    shortstr,
    st.lists(st.tuples(pamqp_tag, st.integers(0, 2**63 - 1)), min_size=1, max_size=4),
    exchange_name,
    shortstr,
    properties(),
    BODY,
    FRAME_MAX,
)
def test_delivery_encoder_is_encode_delivery(
    channel: int,
    ctag: str,
    tags_offsets: list[tuple[int, int]],
    exchange: str,
    rk: str,
    props: commands.Basic.Properties,
    body: bytes,
    fmax: int,
):
    # the cached encoder must give the same bytes as the plain one, delivery after delivery
    raw = props.marshal()
    encoder = hotcodec.DeliveryEncoder(channel, ctag, fmax)
    for tag, offset in tags_offsets:
        out: list[bytes] = []
        encoder.encode(out, tag, exchange, rk, raw, body, offset)
        expected = hotcodec.encode_delivery(
            channel, ctag, tag, exchange, rk, raw, body, fmax, offset
        )
        assert b"".join(out) == b"".join(expected)


@given(
    channel_id,
    shortstr,
    st.lists(
        properties()
        | properties(headers=st.fixed_dictionaries({"x-stream-offset": st.integers(0, 9)}))
        | properties(headers=st.just({"pad": "p" * 4040})),
        min_size=1,
        max_size=12,
    ),
    BODY,
    FRAME_MAX,
)
def test_delivery_encoder_splices_unique_properties_like_encode_delivery(
    channel: int,
    ctag: str,
    props: list[commands.Basic.Properties],
    body: bytes,
    fmax: int,
):
    # past its cache's size the encoder splices each missed property list straight into the
    # pieces (loadgen's -unique-props), and later empties the cache and learns again: a cache
    # of 2 and a relearn after 5 misses walk both paths within a few deliveries
    encoder = hotcodec.DeliveryEncoder(channel, ctag, fmax)
    with (
        mock.patch.object(hotcodec, "_SPLICE_CACHE_MAX", 2),
        mock.patch.object(hotcodec, "_RELEARN_AFTER", 5),
    ):
        for tag, prop in enumerate(props * 2, start=1):
            raw = prop.marshal()
            out: list[bytes] = []
            try:
                expected = hotcodec.encode_delivery(
                    channel, ctag, tag, "", "rk", raw, body, fmax, 2**40 + tag
                )
            except hotcodec.HeaderTooLarge:
                continue
            encoder.encode(out, tag, "", "rk", raw, body, 2**40 + tag)
            assert b"".join(out) == b"".join(expected)


@given(st.integers(-40, 10), st.integers(0, 2**40), st.sampled_from([b"", b"x", b"y" * 5000]))
def test_a_delivery_header_never_exceeds_frame_max(slack: int, offset: int, body: bytes):
    # properties whose header frame ends `slack` bytes under frame_max before the splice
    fmax = 4096
    pad = fmax - hotcodec.HEADER_FRAME_OVERHEAD - 15 - slack
    raw = commands.Basic.Properties(headers={"pad": "p" * pad}).marshal()
    assert len(raw) + hotcodec.HEADER_FRAME_OVERHEAD == fmax - slack
    if slack < 0:
        try:
            hotcodec.encode_delivery(1, "c", 1, "", "rk", raw, body, fmax, offset)
        except hotcodec.HeaderTooLarge as error:
            assert (error.header_frame, error.frame_max) == (fmax - slack, fmax)
        else:
            raise AssertionError("a header over frame_max was encoded")
        return
    ours = b"".join(hotcodec.encode_delivery(1, "c", 1, "", "rk", raw, body, fmax, offset))
    out: list[bytes] = []
    hotcodec.DeliveryEncoder(1, "c", fmax).encode(out, 1, "", "rk", raw, body, offset)
    assert b"".join(out) == ours
    parsed = frames.FrameReader(fmax, 2 * fmax).feed(ours)
    assert all(8 + len(payload) <= fmax for _, _, payload in parsed)
    props = commands.Basic.Properties()
    head = parsed[1][2]
    props.unmarshal(struct.unpack_from(">H", head, 12)[0], head[14:])
    # 25 bytes of splice fit exactly when the published header leaves 25 or more
    assert ("x-stream-offset" in props.headers) == (slack >= 25)
    if slack >= 25:
        assert props.headers["x-stream-offset"] == offset
