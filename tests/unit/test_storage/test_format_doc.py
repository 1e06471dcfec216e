"""docs/storage-format.md's worked example is what the code writes, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

from sievemq.storage import FilterSpec, Message, Stream, StreamConfig, StreamReader
from sievemq.storage.bloom import BloomFilter

DOC = Path(__file__).resolve().parents[3] / "docs" / "storage-format.md"


def _hex_blocks() -> dict[str, bytes]:
    blocks = re.findall(r"<!-- file: (\S+) -->\s*```hex\n(.*?)```", DOC.read_text(), re.S)
    out = {}
    for name, text in blocks:
        digits = "".join(line.split("#", 1)[0] for line in text.splitlines())
        out[name] = bytes.fromhex("".join(digits.split()))
    return out


def test_worked_example_matches_the_bytes_the_code_writes(tmp_path: Path) -> None:
    expected = _hex_blocks()
    assert set(expected) == {"00000000000000000000.segment", "00000000000000000000.index"}
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append(
        [Message((), "", "q1", b"\x00\x00", b"m1"), Message((), "", "q1", b"\x00\x00", b"m2")],
        timestamp_ms=1700000000000,
    )
    s.append(
        [Message(("emea",), "amq.direct", "eu", b"\x10\x00\x02", b"m3")],
        timestamp_ms=1700000000500,
    )
    s.close()
    for name, data in expected.items():
        assert (tmp_path / "s" / name).read_bytes() == data, name


def _chunk_block() -> bytes:
    text = re.findall(r"<!-- chunk: version 2 -->\s*```hex\n(.*?)```", DOC.read_text(), re.S)[0]
    digits = "".join(line.split("#", 1)[0] for line in text.splitlines())
    return bytes.fromhex("".join(digits.split()))


def test_version_2_example_matches_the_bytes_the_code_writes(tmp_path: Path) -> None:
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append([Message((), "", "q1", b"\x00\x00", b"m1")], timestamp_ms=1700000000000)
    s.append([Message((), "", "q1", b"\x00\x00", b"m2")], timestamp_ms=1700000000000)
    s.append(
        [Message(("emea",), "amq.direct", "eu", b"\x10\x00\x02", b"m3")],
        timestamp_ms=1700000000500,
        extra=b"\x00\x01\x80",
    )
    s.close()
    segment = (tmp_path / "s" / "00000000000000000000.segment").read_bytes()
    chunk = _chunk_block()
    assert segment.endswith(chunk)
    reader = StreamReader.open(tmp_path / "s")
    seen: list[bytes] = []
    records = reader.read(10, chunk_filter=lambda extra: seen.append(extra) or True)
    assert [r.body for r in records] == [b"m1", b"m2", b"m3"]  # versions 1 and 2 mixed
    assert seen == [b"\x00\x01\x80"]  # asked only for the chunk that has a blob


def test_documented_bloom_bits_for_emea() -> None:
    bloom = BloomFilter(16)
    bloom.add("emea")
    assert bloom.to_bytes() == bytes.fromhex("04000008000000000000000000000000")
    assert FilterSpec(("emea",)).chunk_may_match(bloom)


def test_stream_record_example_matches_the_bytes_the_code_writes(tmp_path: Path) -> None:
    from sievemq.storage.publishers import publisher_tag, read_tag
    from sievemq.storage.types import KIND_STREAM

    text = re.findall(r"<!-- record: stream -->\s*```hex\n(.*?)```", DOC.read_text(), re.S)[0]
    digits = "".join(line.split("#", 1)[0] for line in text.splitlines())
    expected = bytes.fromhex("".join(digits.split()))
    payload = bytes.fromhex("005375a0026d34")
    s = Stream.open(tmp_path / "s", StreamConfig())
    s.append([Message(("emea",), "", "", publisher_tag("ref", 7), payload, KIND_STREAM)])
    s.close()
    segment = (tmp_path / "s" / "00000000000000000000.segment").read_bytes()
    assert segment.endswith(expected)  # the data section is this one record
    [record] = StreamReader.open(tmp_path / "s").read(10)
    assert (record.kind, record.body, record.filter_values) == (KIND_STREAM, payload, ("emea",))
    assert read_tag(record.properties) == ("ref", 7)
