"""Publisher sequences come from the data: never ahead of it after a torn tail is cut."""

from __future__ import annotations

import os
from pathlib import Path

from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage.publishers import PublisherSequences, publisher_tag
from sievemq.storage.types import KIND_STREAM


def _append(stream: Stream, ref: str, ids: range) -> None:
    stream.append([Message((), "", "", publisher_tag(ref, i), b"p", KIND_STREAM) for i in ids])


def test_sequences_scan_snapshot_and_torn_tail(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = Stream.open(d, StreamConfig())
    _append(s, "a", range(1, 4))
    _append(s, "b", range(10, 12))
    s.append([Message((), "", "q", b"\x00\x00", b"amqp")])  # a 0-9-1 record in between
    seq = PublisherSequences(s)
    assert (seq.get("a"), seq.get("b"), seq.get("c")) == (3, 11, None)
    seq.save(s.end_offset)
    _append(s, "a", range(4, 6))
    end_before = s.end_offset
    s.close()
    s = Stream.open(d, StreamConfig())
    assert PublisherSequences(s).get("a") == 5  # snapshot + scan of what came after
    s.close()
    # cut the last chunk in half: recovery drops it, and the sequence goes back with it
    seg = d / "00000000000000000000.segment"
    os.truncate(seg, seg.stat().st_size - 3)
    s = Stream.open(d, StreamConfig())
    assert s.end_offset < end_before
    assert PublisherSequences(s).get("a") == 3
    s.close()


def test_a_snapshot_past_the_data_is_ignored(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = Stream.open(d, StreamConfig())
    _append(s, "a", range(1, 3))
    seq = PublisherSequences(s)
    seq.update("a", 99)  # as if written, but the data never got there
    seq.save(s.end_offset + 5)
    s.close()
    s = Stream.open(d, StreamConfig())
    assert PublisherSequences(s).get("a") == 2
    s.close()
