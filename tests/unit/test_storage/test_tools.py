"""`storage verify` / `storage dump` (tested as functions: sievemq.settings, which cli.py
imports, is not on this branch yet)."""

from __future__ import annotations

import io
import os
from pathlib import Path

from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage.tools import dump, verify


def _stream(directory: Path) -> None:
    s = Stream.open(directory, StreamConfig(max_segment_bytes=400, compression="zstd"))
    for i in range(6):
        s.append(
            [Message((f"v{i}",), "ex", f"rk{i}", b"", b"z" * 300) for _ in range(2)],
            timestamp_ms=1700000000000 + i,
        )
    s.close()


def test_verify_sound_stream(tmp_path: Path) -> None:
    _stream(tmp_path)
    out = io.StringIO()
    assert verify(tmp_path, out) == 0
    assert "OK" in out.getvalue() and "6 chunk(s), 12 record(s)" in out.getvalue()


def test_verify_reports_each_problem(tmp_path: Path) -> None:
    _stream(tmp_path)
    segments = sorted(tmp_path.glob("*.segment"))
    data = bytearray(segments[0].read_bytes())
    data[-1] ^= 0xFF  # data CRC of the first segment's last chunk
    segments[0].write_bytes(bytes(data))
    os.truncate(segments[-1], segments[-1].stat().st_size - 5)  # torn tail
    (tmp_path / f"{999:020d}.index").write_bytes(b"")  # orphan
    out = io.StringIO()
    assert verify(tmp_path, out) == 1
    text = out.getvalue()
    assert "data CRC mismatch" in text
    assert "cut short" in text
    assert "index without a segment" in text
    assert "1 index entries point past the last chunk" in text
    assert "4 problem(s)" in text


def test_verify_missing_directory(tmp_path: Path) -> None:
    out = io.StringIO()
    assert verify(tmp_path / "nope", out) == 1


def test_dump_lists_chunks_and_records(tmp_path: Path) -> None:
    _stream(tmp_path)
    out = io.StringIO()
    assert dump(tmp_path, out) == 0
    lines = out.getvalue().splitlines()
    chunks = [line for line in lines if line.strip().startswith("chunk")]
    assert len(chunks) == 6
    assert "offset=0 count=2 timestamp=1700000000000" in chunks[0]
    assert "bloom=16 compression=zstd" in chunks[0]
    out = io.StringIO()
    assert dump(tmp_path, out, records=True) == 0
    records = [line.strip() for line in out.getvalue().splitlines() if "record" in line]
    assert len(records) == 12
    assert records[3] == "record offset=3 filter=v1 routing_key='rk1' body=300B"
