"""streamproto: frames, osiris Deliver chunks and AMQP 1.0, checked against the research
worked example and against rstream's own decoder and AMQP 1.0 codec (test oracles)."""

from __future__ import annotations

import gzip
import struct
import uuid

import pytest
from rstream import AMQPMessage, amqp_decoder
from rstream._pyamqp.message import Header, Properties
from rstream.encoding import decode_frame

from sievemq.streamproto import amqp10, osiris, wire

# a Deliver v1 frame, written out by hand: subscription 0, a chunk of two {data} entries
WORKED = bytes.fromhex(
    "0000004b 0008 0001 00"
    "50 00 0002 00000002 0000018bcfe56800"
    "0000000000000001 0000000000000000"
    "585cac94 00000016 00000000 00 000000"
    "00000007 005375a0026d31"
    "00000007 005375a0026d32".replace(" ", "")
)


def test_deliver_matches_the_worked_example_byte_for_byte() -> None:
    payloads = [amqp10.data_message(b"m1"), amqp10.data_message(b"m2")]
    assert osiris.deliver(0, 0, 1_700_000_000_000, payloads) == WORKED


def test_rstream_decodes_our_deliver() -> None:
    frame = decode_frame(osiris.deliver(3, 41, 5, [b"raw", amqp10.data_message(b"x")])[4:])
    assert frame.subscription_id == 3 and frame.chunk_first_offset == 41
    assert frame.get_messages() == [b"raw", amqp10.data_message(b"x")]


def test_split_frames_keeps_partial_frames_and_reports_oversized() -> None:
    buf = bytearray(wire.heartbeat() + wire.tune(1000, 60)[:5])
    frames, bad = wire.split_frames(buf, 1 << 20)
    assert [(f.key, f.version, f.body) for f in frames] == [(wire.HEARTBEAT, 1, b"")]
    assert bad is None and len(buf) == 5
    buf += wire.tune(1000, 60)[5:]
    frames, bad = wire.split_frames(buf, 1 << 20)
    assert frames[0].key == wire.TUNE and not buf
    frames, bad = wire.split_frames(bytearray(struct.pack(">I", 2 << 20)), 1 << 20)
    assert frames == [] and bad == 2 << 20


def _publish(version: int, entries: list[bytes]) -> bytes:
    return struct.pack(">Bi", 7, len(entries)) + b"".join(entries)


def test_parse_publish_v1_v2_and_sub_entry_batches() -> None:
    v1 = _publish(1, [struct.pack(">Qi", 1, 3) + b"abc"])
    assert wire.parse_publish(v1, 1) == (7, [wire.PublishedEntry(1, None, [b"abc"], 0)])
    v2 = _publish(
        2,
        [
            struct.pack(">Qh", 5, 4) + b"emea" + struct.pack(">i", 1) + b"x",
            struct.pack(">Qh", 6, -1) + struct.pack(">i", 1) + b"y",
        ],
    )
    _, entries = wire.parse_publish(v2, 2)
    assert [(e.publishing_id, e.filter_value, e.payloads) for e in entries] == [
        (5, "emea", [b"x"]),
        (6, None, [b"y"]),
    ]
    inner = struct.pack(">I", 2) + b"r1" + struct.pack(">I", 2) + b"r2"
    packed = gzip.compress(inner)
    batch = struct.pack(">QBHII", 9, 0x80 | (1 << 4), 2, len(inner), len(packed)) + packed
    _, [entry] = wire.parse_publish(_publish(1, [batch]), 1)
    assert entry == wire.PublishedEntry(9, None, [b"r1", b"r2"], 0)
    lz4 = struct.pack(">QBHII", 10, 0x80 | (3 << 4), 1, 4, 4) + b"zzzz"
    _, [entry] = wire.parse_publish(_publish(1, [lz4]), 1)
    assert entry.error == wire.PRECONDITION_FAILED  # a codec SieveMQ does not have
    with pytest.raises(wire.FrameError):
        wire.parse_publish(_publish(1, [struct.pack(">Qi", 1, 30) + b"short"]), 1)


def test_amqp10_codec_agrees_with_rstreams() -> None:
    mid = uuid.uuid4()
    theirs = AMQPMessage(
        body=b"payload",
        header=Header(durable=True, priority=5),
        properties=Properties(message_id=mid, content_type="text/plain", creation_time=123),
        application_properties={"k": "v", "n": 7, "big": 1 << 40},
        message_annotations={"x-stream-filter-value": "emea"},
    )
    ours = amqp10.decode_message(bytes(theirs))
    assert ours.body == [b"payload"]
    assert ours.header is not None and ours.header[:2] == [True, 5]
    assert ours.properties is not None and ours.properties[0] == mid
    assert ours.properties[6] == "text/plain" and ours.properties[9] == 123
    assert ours.application_properties == {"k": "v", "n": 7, "big": 1 << 40}
    assert ours.message_annotations == {"x-stream-filter-value": "emea"}
    back = amqp_decoder(amqp10.encode_message(ours))
    assert back.body == b"payload"
    assert back.properties.message_id == mid
    assert back.application_properties[b"n"] == 7


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        127,
        1 << 40,
        -(1 << 50),
        1.5,
        "",
        "x" * 300,
        b"\x00" * 300,
        amqp10.Symbol("sym"),
        amqp10.Timestamp(1_700_000_000_000),
        uuid.UUID(int=5),
        [1, "a", [2]],
        {"a": {"b": [None]}},
        amqp10.ULong(1 << 63),
        amqp10.UInt(70000),
    ],
)
def test_amqp10_values_round_trip(value: object) -> None:
    encoded = amqp10.encode_value(value)
    decoded, end = amqp10.decode_value(encoded, 0)
    assert end == len(encoded)
    assert decoded == value
    assert type(decoded) is type(value)


@pytest.mark.parametrize(
    "junk", [b"one", b"\x00\x53", b"\x00\x53\x75\xa0\x09ab", b"\x00\x53\x99\x40"]
)
def test_non_amqp10_payloads_are_rejected_cleanly(junk: bytes) -> None:
    with pytest.raises(amqp10.Amqp10Error):
        amqp10.decode_message(junk)
