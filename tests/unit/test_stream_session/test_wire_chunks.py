"""Whole stored chunks go to stream subscribers as osiris chunks built once per stream."""

from __future__ import annotations

from pathlib import Path

from sievemq.gateway.stream_session import subscription
from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage.types import KIND_STREAM
from sievemq.streamproto import osiris


def _stream(tmp_path: Path) -> Stream:
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append([Message(("v1",), "", "", b"tag", b"a" * n, KIND_STREAM) for n in (0, 3, 700)])
    s.append(
        [Message((), "", "", b"", b"raw", KIND_STREAM), Message((), "amq.direct", "k", b"", b"x")]
    )
    return s


def test_a_stream_protocol_chunk_is_the_osiris_chunk_of_its_payloads(tmp_path: Path) -> None:
    s = _stream(tmp_path)
    [first, mixed] = s.reader().read_chunks(10)
    built = subscription.wire_chunk(s, first)
    payloads = [b"", b"aaa", b"a" * 700]  # filter values and tags never go on the wire
    expected = osiris.deliver(7, 0, first.timestamp_ms, payloads)
    prefix = osiris.deliver_prefix(7, len(built or b""))
    assert prefix + (built or b"") == expected
    assert subscription.wire_chunk(s, first) is built  # built once, shared
    # a chunk holding a 0-9-1 record needs converting: not built here (the record path)
    assert subscription.wire_chunk(s, mixed) is None
    s.close()


def test_a_chunk_entered_in_the_middle_starts_at_the_reader_position(tmp_path: Path) -> None:
    s = _stream(tmp_path)
    reader = s.reader()
    reader.seek_offset(1)
    [part, _] = reader.read_chunks(10)
    built = subscription.wire_chunk(s, part)
    assert osiris.deliver_prefix(0, len(built or b"")) + (built or b"") == osiris.deliver(
        0, 1, part.timestamp_ms, [b"aaa", b"a" * 700]
    )
    whole = subscription.wire_chunk(s, s.reader().read_chunks(1)[0])
    assert whole is not None and whole != built  # a partial chunk is not cached as the chunk
    s.close()
