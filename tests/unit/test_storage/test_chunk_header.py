"""The chunk header is parsed in one place (``chunk.unpack_header``): the reader, recovery
and the tools agree on what a header says, including the corner cases of the format."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from sievemq.storage import Message, StorageError, Stream, StreamConfig, StreamReader
from sievemq.storage.chunk import (
    FILE_HEADER_SIZE,
    HEADER_SIZE,
    encode_chunk,
    parse_header,
    unpack_header,
)
from sievemq.storage.segment import segment_name


def _message(body: bytes, value: str = "a") -> Message:
    return Message((value,), "amq.direct", "rk", b"\x80\x00", body)


def _bodies(directory: Path) -> list[bytes]:
    reader = StreamReader.open(directory)
    try:
        reader.seek_first()
        return [r.body for r in reader.read(100)]
    finally:
        reader.close()


def _one_chunk_stream(tmp_path: Path, **config: object) -> Path:
    with Stream.open(tmp_path, StreamConfig(**config)) as stream:  # type: ignore[arg-type]
        stream.append([_message(b"m1"), _message(b"m2")])
    return tmp_path


def _rewrite_header(directory: Path, **byte_changes: bytes) -> None:
    """Change header bytes of the first chunk (``at_40=b"..."``) and fix the header CRC."""
    path = directory / segment_name(0)
    data = bytearray(path.read_bytes())
    start = FILE_HEADER_SIZE
    for key, value in byte_changes.items():
        at = start + int(key.removeprefix("at_"))
        data[at : at + len(value)] = value
    header = parse_header(bytes(data[start : start + HEADER_SIZE]))
    bloom = header.bloom_size if header is not None else 16
    crc = zlib.crc32(
        bytes(data[start + HEADER_SIZE : start + HEADER_SIZE + bloom]),
        zlib.crc32(bytes(data[start : start + HEADER_SIZE - 4])),
    )
    data[start + HEADER_SIZE - 4 : start + HEADER_SIZE] = struct.pack(">I", crc)
    path.write_bytes(bytes(data))


def test_unpack_and_parse_agree_on_a_version_2_header() -> None:
    buf = b"".join(encode_chunk([_message(b"x")], 7, 1234, 16, extra=b"bits"))
    fields = unpack_header(buf)
    header = parse_header(buf)
    assert fields is not None and header is not None
    assert fields[1] == 2  # version 2: it carries an extra blob
    assert (header.first_offset, header.record_count, header.timestamp_ms) == (7, 1, 1234)
    assert (header.bloom_size, header.extra_size) == (16, 4) == (fields[5], fields[12])
    assert header.header_crc == fields[13]


def test_a_version_1_header_has_no_extra_even_with_bytes_in_the_reserved_field(
    tmp_path: Path,
) -> None:
    directory = _one_chunk_stream(tmp_path)
    _rewrite_header(directory, at_40=b"\x00\x00\x00\x09")  # reserved in version 1
    raw = (directory / segment_name(0)).read_bytes()[FILE_HEADER_SIZE:]
    header = parse_header(raw)
    assert header is not None and header.extra_size == 0
    assert _bodies(directory) == [b"m1", b"m2"]


def test_an_unknown_version_is_refused_by_the_parser_and_the_reader(tmp_path: Path) -> None:
    directory = _one_chunk_stream(tmp_path)
    _rewrite_header(directory, at_2=b"\x03")
    raw = (directory / segment_name(0)).read_bytes()[FILE_HEADER_SIZE:]
    assert unpack_header(raw) is None and parse_header(raw) is None
    reader = StreamReader(directory, bound=lambda: 2)
    try:
        reader.seek_first()
        with pytest.raises(StorageError, match="bad chunk header"):
            reader.read(10)
    finally:
        reader.close()


def test_a_compressed_chunk_is_read_with_the_header_parsed_once(tmp_path: Path) -> None:
    directory = _one_chunk_stream(tmp_path, compression="zstd")
    header = parse_header((directory / segment_name(0)).read_bytes()[FILE_HEADER_SIZE:])
    assert header is not None and header.flags & 1  # FLAG_ZSTD
    assert _bodies(directory) == [b"m1", b"m2"]
