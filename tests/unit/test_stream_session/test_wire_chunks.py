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
    built = subscription.wire_chunks(s, first, 1 << 20)
    assert built is not None
    [(at, chunk)] = built
    payloads = [b"", b"aaa", b"a" * 700]  # filter values and tags never go on the wire
    expected = osiris.deliver(7, 0, first.timestamp_ms, payloads)
    assert at == 0 and osiris.deliver_prefix(7, len(chunk)) + chunk == expected
    assert subscription.wire_chunks(s, first, 1 << 20) is built  # built once, shared
    # a chunk holding a 0-9-1 record needs converting: not built here (the record path)
    assert subscription.wire_chunks(s, mixed, 1 << 20) is None
    s.close()


def test_a_chunk_over_the_frame_budget_goes_out_as_several(tmp_path: Path) -> None:
    s = _stream(tmp_path)
    [first, _] = s.reader().read_chunks(10)
    built = subscription.wire_chunks(s, first, 4 + 3 + 4)  # room for "" and "aaa" only
    assert built is not None
    ts = first.timestamp_ms
    assert [osiris.deliver_prefix(1, len(c)) + c for _, c in built] == [
        osiris.deliver(1, 0, ts, [b"", b"aaa"]),
        osiris.deliver(1, 2, ts, [b"a" * 700]),  # longer than the budget: alone
    ]
    assert [at for at, _ in built] == [0, 2]
    s.close()


def test_a_chunk_entered_in_the_middle_starts_at_the_reader_position(tmp_path: Path) -> None:
    s = _stream(tmp_path)
    reader = s.reader()
    reader.seek_offset(1)
    [part, _] = reader.read_chunks(10)
    built = subscription.wire_chunks(s, part, 1 << 20)
    assert built is not None
    [(at, chunk)] = built
    assert at == 1
    assert osiris.deliver_prefix(0, len(chunk)) + chunk == osiris.deliver(
        0, 1, part.timestamp_ms, [b"aaa", b"a" * 700]
    )
    whole = subscription.wire_chunks(s, s.reader().read_chunks(1)[0], 1 << 20)
    assert whole is not None and whole != built  # a partial chunk is not cached as the chunk
    s.close()
