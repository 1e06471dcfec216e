"""0-9-1 records are converted to AMQP 1.0 once per stream and shared by its subscribers."""

from __future__ import annotations

from pathlib import Path

from sievemq.gateway.streamproto_session import subscription
from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage.types import KIND_STREAM
from sievemq.streamproto import convert


def test_conversion_is_cached_per_stream_and_stream_payloads_pass_through(
    tmp_path: Path,
) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append(
        [
            Message((), "amq.direct", "rk", b"\x00\x00", b"body"),
            Message((), "", "", b"", b"raw", KIND_STREAM),
        ]
    )
    records = s.reader().read(10)
    first = subscription.payload_of(records[0], s)
    assert first == convert.to_amqp10("amq.direct", "rk", b"\x00\x00", b"body")
    assert subscription.payload_of(records[0], s) is first  # converted once
    assert subscription.payload_of(records[1], s) == b"raw"
    s.delete()
    again = Stream.open(tmp_path / "s", StreamConfig())  # same directory, new stream
    again.append([Message((), "x", "other", b"\x00\x00", b"new")])
    [record] = again.reader().read(10)
    assert subscription.payload_of(record, again) == convert.to_amqp10(
        "x", "other", b"\x00\x00", b"new"
    )
    again.close()
