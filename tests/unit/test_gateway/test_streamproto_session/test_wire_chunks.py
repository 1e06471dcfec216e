"""Whole stored chunks go to stream subscribers as osiris chunks built once per stream.

Every test runs on both chunk layouts: the osiris layout that batches of stream-protocol
publishes are written in now (the Deliver data section stored as is, with its CRC), and the
record-table layout of chunks written before it (old data must read the same).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.gateway.streamproto_session import subscription
from sievemq.storage import FilterSpec, Message, Stream, StreamConfig, chunk
from sievemq.storage.types import KIND_STREAM
from sievemq.streamproto import osiris


@pytest.fixture(params=[True, False], ids=["osiris-layout", "record-table-layout"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(chunk, "OSIRIS_LAYOUT", request.param)
    return bool(request.param)


def _stream(tmp_path: Path) -> Stream:
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append([Message(("v1",), "", "", b"tag", b"a" * n, KIND_STREAM) for n in (0, 3, 700)])
    s.append(
        [Message((), "", "", b"", b"raw", KIND_STREAM), Message((), "amq.direct", "k", b"", b"x")]
    )
    return s


def _frames(built: subscription.Built | None, sid: int = 1) -> list[bytes]:
    assert built is not None
    return [osiris.deliver_prefix(sid, len(h) + len(d)) + h + bytes(d) for _, h, d in built]


def test_a_stream_protocol_chunk_is_the_osiris_chunk_of_its_payloads(
    tmp_path: Path, layout: bool
) -> None:
    s = _stream(tmp_path)
    [first, mixed] = s.reader().read_chunks(10, osiris=True)
    assert first.osiris is layout and not mixed.osiris  # a chunk mixing kinds: record table
    built = subscription.wire_chunks(s, first, 1 << 20)
    payloads = [b"", b"aaa", b"a" * 700]  # filter values and tags never go on the wire
    assert _frames(built, 7) == [osiris.deliver(7, 0, first.timestamp_ms, payloads)]
    assert built is not None and built[0][0] == 0
    assert subscription.wire_chunks(s, first, 1 << 20) is built  # built once, shared
    # a chunk holding a 0-9-1 record needs converting: not built here (the record path)
    assert subscription.wire_chunks(s, mixed, 1 << 20) is None
    s.close()


def test_a_chunk_over_the_frame_budget_goes_out_as_several(tmp_path: Path, layout: bool) -> None:
    s = _stream(tmp_path)
    [first, _] = s.reader().read_chunks(10, osiris=True)
    built = subscription.wire_chunks(s, first, 4 + 3 + 4)  # room for "" and "aaa" only
    ts = first.timestamp_ms
    assert _frames(built) == [
        osiris.deliver(1, 0, ts, [b"", b"aaa"]),
        osiris.deliver(1, 2, ts, [b"a" * 700]),  # longer than the budget: alone
    ]
    assert built is not None and [at for at, _, _ in built] == [0, 2]
    s.close()


def test_a_chunk_entered_in_the_middle_starts_at_the_reader_position(
    tmp_path: Path, layout: bool
) -> None:
    s = _stream(tmp_path)
    reader = s.reader()
    reader.seek_offset(1)
    [part, _] = reader.read_chunks(10, osiris=True)
    built = subscription.wire_chunks(s, part, 1 << 20)
    assert _frames(built, 0) == [osiris.deliver(0, 1, part.timestamp_ms, [b"aaa", b"a" * 700])]
    assert built is not None and built[0][0] == 1
    whole = subscription.wire_chunks(s, s.reader().read_chunks(1, osiris=True)[0], 1 << 20)
    assert whole is not None and whole != built  # a partial chunk is not cached as the chunk
    s.close()


def test_old_and_new_layouts_in_one_stream_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream written before the osiris layout, appended to after: every reader (records,
    undecoded chunks, Deliver chunks) sees the same records in both halves."""
    s = Stream.open(tmp_path / "s", StreamConfig())
    batch = [
        Message(("v1",), "", "", b"tag", b"b" * 1, KIND_STREAM),
        Message(("v2", "v3"), "", "", b"", b"b" * 200, KIND_STREAM),
        Message((), "", "", b"t", b"", KIND_STREAM),
    ]
    monkeypatch.setattr(chunk, "OSIRIS_LAYOUT", False)
    s.append(batch, timestamp_ms=1)
    monkeypatch.setattr(chunk, "OSIRIS_LAYOUT", True)
    s.append(batch, timestamp_ms=1)
    records = s.reader().read(10)
    assert [(r.offset, r.filter_values, r.properties, r.body, r.kind) for r in records] == [
        (i, m.filter_values, m.properties, m.body, KIND_STREAM) for i, m in enumerate(batch * 2)
    ]
    # an exact filter (the stream protocol's filter.N, 0-9-1's x-stream-filter), from offset 1
    reader = s.reader()
    reader.seek_offset(1)
    assert [r.offset for r in reader.read(10, FilterSpec(("v3",)))] == [1, 4]
    reader = s.reader()
    reader.seek_offset(4)
    assert [r.offset for r in reader.read(10, FilterSpec(("v1",), match_unfiltered=True))] == [5]
    old, new = s.reader().read_chunks(10, osiris=True)
    assert (old.osiris, new.osiris) == (False, True)
    # without osiris=True (Spark) both come in the record-table layout, byte for byte alike
    plain_old, plain_new = s.reader().read_chunks(10)
    assert not plain_new.osiris and plain_old.data == plain_new.data
    old_frames = _frames(subscription.wire_chunks(s, old, 1 << 20))
    new_frames = _frames(subscription.wire_chunks(s, new, 1 << 20))
    assert [f[:33] + f[41:] for f in old_frames] == [f[:33] + f[41:] for f in new_frames]
    assert old_frames != new_frames  # only the chunk id (frame bytes 33..40) differs
    s.close()


def test_osiris_data_that_does_not_add_up_is_a_storage_error(tmp_path: Path) -> None:
    [buffers] = [chunk.encode_chunk([Message((), "", "", b"", b"xyz", KIND_STREAM)], 0, 0, 16)]
    data = b"".join(buffers[1:])
    assert chunk.osiris_to_table(data, 1) == chunk.ENTRY.pack(0x80, 0, 0, 0, 0, 3) + b"xyz"
    bad = b"\x00\x00\x00\x02" + data[4:]  # the entry's length no longer matches the table
    with pytest.raises(chunk.StorageError):
        chunk.osiris_to_table(bad, 1)
    with pytest.raises(chunk.StorageError):
        chunk.osiris_runs(bad, 1, 0, 2, 10)  # cut at a budget: the lengths are walked
