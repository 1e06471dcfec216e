"""Storage side of registered subscriptions: the opaque per-chunk extra blob (chunk v2)."""

from __future__ import annotations

import io
from pathlib import Path

from sievemq.storage import FilterSpec, Stream, StreamConfig, StreamReader
from sievemq.storage.tools import dump, verify

from .storage_helpers import msg, read_all


def _mixed(directory: Path, **config: object) -> Stream:
    """Chunks: v1 (offsets 0-1), v2 'no' (2-3), v2 'yes' (4-5), v1 (6-7); small segments."""
    s = Stream.open(directory, StreamConfig(**config))  # type: ignore[arg-type]
    s.append([msg(b"a0"), msg(b"a1")])
    s.append([msg(b"b0"), msg(b"b1")], extra=b"no")
    s.append([msg(b"c0", "x"), msg(b"c1")], extra=b"yes")
    s.append([msg(b"d0"), msg(b"d1")])
    return s


def test_chunk_filter_skips_bodies_and_keeps_chunks_without_blob(tmp_path: Path) -> None:
    s = _mixed(tmp_path / "s")
    r = s.reader()
    r.seek_first()
    got = read_all(r, chunk_filter=lambda extra: extra == b"yes")
    assert [x.body for x in got] == [b"a0", b"a1", b"c0", b"c1", b"d0", b"d1"]
    assert r.stats.chunks_skipped_subscription == 1
    assert r.stats.chunks_scanned == 4
    assert r.position == 8


def test_without_chunk_filter_every_record_reads(tmp_path: Path) -> None:
    s = _mixed(tmp_path / "s", max_segment_bytes=120, compression="zstd")
    r = s.reader()
    r.seek_first()
    assert [x.offset for x in read_all(r)] == list(range(8))
    assert r.stats.chunks_skipped_subscription == 0


def test_bloom_is_checked_before_the_chunk_filter(tmp_path: Path) -> None:
    s = _mixed(tmp_path / "s")
    asked: list[bytes] = []
    r = s.reader()
    r.seek_first()
    got = read_all(r, spec=FilterSpec(("x",)), chunk_filter=lambda e: asked.append(e) or True)
    assert [x.body for x in got] == [b"c0"]
    assert asked == [b"yes"]  # the 'no' chunk has no filter value: its Bloom said no first


def test_recovery_and_tools_understand_version_2(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    s = _mixed(directory, max_segment_bytes=150)
    s.close()
    seg = sorted(directory.glob("*.segment"))[-1]
    with seg.open("ab") as f:
        f.write(b"SQ\x02torn")  # a torn tail after the last chunk
    s = Stream.open(directory, StreamConfig(max_segment_bytes=150))
    assert s.end_offset == 8
    s.append([msg(b"e0")], extra=b"yes")
    s.close()
    out = io.StringIO()
    assert verify(directory, out) == 0, out.getvalue()
    out = io.StringIO()
    dump(directory, out)
    assert out.getvalue().count("extra=3") == 2 and out.getvalue().count("extra=2") == 1
    assert len(read_all(StreamReader.open(directory))) == 9
