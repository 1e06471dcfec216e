"""FrameReader: structure checks, limits, and fuzzing with arbitrary bytes and chunkings."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sievemq.amqp import errors, frames

FRAME = st.tuples(
    st.sampled_from([frames.FRAME_METHOD, frames.FRAME_HEADER, frames.FRAME_BODY]),
    st.integers(0, 65535),
    st.binary(max_size=200),
) | st.just((frames.FRAME_HEARTBEAT, 0, b""))


def encode(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"


def feed_all(reader: frames.FrameReader, chunks: list[bytes]) -> list[tuple[int, int, bytes]]:
    out = []
    for chunk in chunks:
        out += reader.feed(chunk)
    return out


@given(st.lists(FRAME, max_size=6))
def test_valid_frames_split_at_every_byte_parse_identically(frame_list):
    data = b"".join(encode(*f) for f in frame_list)
    for cut in range(len(data) + 1):
        reader = frames.FrameReader(4096, 4096)
        assert feed_all(reader, [data[:cut], data[cut:]]) == frame_list
        assert reader.buffered == 0


@given(st.lists(FRAME, max_size=4))
def test_valid_frames_fed_byte_by_byte(frame_list):
    data = b"".join(encode(*f) for f in frame_list)
    reader = frames.FrameReader(4096, 4096)
    parsed = feed_all(reader, [data[i : i + 1] for i in range(len(data))])
    assert parsed == frame_list
    assert all(type(p) is bytes for _, _, p in parsed)


@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=8))
def test_arbitrary_bytes_raise_only_amqp_errors(data: bytes, cuts: list[int]):
    points = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    reader = frames.FrameReader(4096, 1024)
    try:
        feed_all(reader, chunks)
    except errors.AMQPError as exc:
        assert exc.closes_connection and exc.reply_code in (501, 506)


@given(st.lists(FRAME, min_size=1, max_size=4), st.binary(min_size=1, max_size=50))
def test_garbage_after_valid_frames_is_an_error_or_waits(frame_list, garbage: bytes):
    reader = frames.FrameReader(4096, 4096)
    assert reader.feed(b"".join(encode(*f) for f in frame_list)) == frame_list
    try:
        parsed = reader.feed(garbage)
    except errors.FrameError:
        return
    # garbage that happens to look like frames parses as exactly those frames
    consumed = len(garbage) - reader.buffered
    assert b"".join(encode(*f) for f in parsed) == garbage[:consumed]


def test_bad_frame_end_is_501():
    data = encode(1, 1, b"abcd")[:-1] + b"\x00"
    with pytest.raises(errors.FrameError) as info:
        frames.FrameReader(4096, 4096).feed(data)
    assert info.value.reply_code == 501


def test_unknown_frame_type_is_501_without_waiting_for_the_payload():
    with pytest.raises(errors.FrameError, match="unknown frame type 4"):
        frames.FrameReader(4096, 4096).feed(b"\x04\x00\x01\x00\x00\x10\x00")


def test_frame_larger_than_frame_max_is_501():
    reader = frames.FrameReader(4096, 1 << 20)
    assert reader.feed(encode(3, 1, bytes(4088))) == [(3, 1, bytes(4088))]
    with pytest.raises(errors.FrameError, match="frame_max"):
        reader.feed(encode(3, 1, bytes(4089))[:7])


def test_lowering_frame_max_takes_effect():
    reader = frames.FrameReader(131072, 1 << 20)
    reader.feed(encode(3, 1, bytes(10000)))
    reader.frame_max = 4096
    with pytest.raises(errors.FrameError):
        reader.feed(encode(3, 1, bytes(10000)))


def test_heartbeat_off_channel_zero_is_501():
    with pytest.raises(errors.FrameError, match="heartbeat"):
        frames.FrameReader(4096, 4096).feed(encode(8, 3, b""))


def test_unparsed_bytes_above_max_buffer_is_506():
    reader = frames.FrameReader(131072, 1000)
    reader.feed(encode(3, 1, bytes(2000))[:900])
    with pytest.raises(errors.ResourceError) as info:
        reader.feed(bytes(200))
    assert info.value.reply_code == 506


def test_large_frame_in_small_reads_buffers_without_parsing_early():
    data = encode(3, 7, bytes(range(256)) * 400)
    reader = frames.FrameReader(131072, 131072)
    parsed = feed_all(reader, [data[i : i + 1000] for i in range(0, len(data), 1000)])
    assert parsed == [(3, 7, bytes(range(256)) * 400)]


def test_accepts_bytearray_and_memoryview():
    data = encode(1, 2, b"xyz")
    assert frames.FrameReader(4096, 4096).feed(bytearray(data)) == [(1, 2, b"xyz")]
    assert frames.FrameReader(4096, 4096).feed(memoryview(data)) == [(1, 2, b"xyz")]


@pytest.mark.parametrize(
    ("data", "verdict"),
    [
        (b"", None),
        (b"AMQ", None),
        (b"AMQP\x00\x00\x09", None),
        (b"AMQP\x00\x01", None),  # waited for whole, so the refusal can name it
        (b"AMQP\x00\x01\x00\x00", False),
        (b"AMQP\x00\x00\x09\x01", True),
        (b"AMQP\x00\x00\x09\x01\x01\x00", True),
        (b"AMQP\x01\x01\x00\x09", False),
        (b"AMQP\x00\x00\x08\x00", False),
        (b"GET / HT", False),
        (b"G", False),
    ],
)
def test_protocol_header(data: bytes, verdict: bool | None):
    assert frames.check_protocol_header(data) is verdict


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"AMQP\x00\x01\x00\x00", "AMQP 1.0"),
        (b"AMQP\x03\x01\x00\x00", "AMQP 1.0 (SASL layer)"),
        (b"AMQP\x01\x01\x00\x09", "AMQP 0-9"),
        (b"AMQP\x00\x00\x08\x00", "an unknown AMQP version"),
        (b"GET / HTTP/1.1\r\n", "HTTP"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01", "TLS"),
        (b"hello", "no AMQP protocol"),
    ],
)
def test_a_refused_header_is_named(data: bytes, words: str):
    assert frames.describe_protocol_header(data).startswith(words)
