"""Chunk byte format: encode a batch into one chunk, parse headers, decode records.

Hot path (append and read). docs/storage-format.md is the byte specification; the layout:

    header (48 B) | Bloom bits (bloom_size B) | extra (extra_size B, version 2) | data

``extra`` is an opaque per-chunk blob the writer's owner supplies (the gateway stores its
registered-subscription bits there); a chunk without one is written as version 1, so both
versions mix in one segment.

data, after zstd decompression when flag bit 0 is set, is a record table of 15-byte entries
(one per record) followed by the record payloads in the same order, so a reader unpacks all
lengths with one ``iter_unpack`` and then only slices.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import NamedTuple, cast

from isal.isal_zlib import crc32

from sievemq.storage.bloom import HASH_MMH3, BloomFilter
from sievemq.storage.errors import StorageError
from sievemq.storage.filters import FilterSpec
from sievemq.storage.types import KIND_STREAM, Message, Record

MAGIC = b"SQ"
VERSION = 1  # no extra blob: bytes 40..43 are reserved (0)
VERSION_EXTRA = 2  # bytes 40..43 hold the extra blob's length; it follows the Bloom bytes
MAX_EXTRA = 0xFFFF
TYPE_USER = 0
FLAG_ZSTD = 0x01
# data in the osiris layout (a batch of stream-protocol records, uncompressed): the stream
# protocol's entry list first, then the record table and the other fields, then a trailer
FLAG_OSIRIS = 0x02
OSIRIS_LAYOUT = True  # write such batches in it (tests turn it off to write the old layout)
_TRAILER = struct.Struct(">II")  # entry-list length, CRC-32 of the entry list

# magic, version, type, flags, hash id, bloom size, first offset, record count, timestamp,
# data length (as stored), raw length (uncompressed), data CRC32, extra length (v2; v1: 0)
_HEADER_BODY = struct.Struct(">2sBBBBHQIqIIII")
HEADER = struct.Struct(">2sBBBBHQIqIIIII")  # ... + header CRC32 (bytes 0..43 + Bloom + extra)
HEADER_SIZE = HEADER.size  # 48
ENTRY = struct.Struct(">BIBBII")  # filter count, filter bytes, exchange, rk, props, body
ENTRY_SIZE = ENTRY.size  # 15
# top bit of an entry's filter-count byte: the record is KIND_STREAM (a stream-protocol
# payload kept byte for byte); the low 7 bits are the filter value count (at most 64)
_KIND_BIT = 0x80
_COUNT_MASK = 0x7F

SEGMENT_MAGIC = b"SQSG\x00\x00\x00\x01"
INDEX_MAGIC = b"SQIX\x00\x00\x00\x01"
FILE_HEADER_SIZE = 8
INDEX_ENTRY = struct.Struct(">QqQ")  # chunk first offset, timestamp, file position
INDEX_ENTRY_SIZE = INDEX_ENTRY.size  # 24

_pack_header_body = _HEADER_BODY.pack
_kind_of = itemgetter(5)  # Message.kind
_pack_u32 = struct.Struct(">I").pack
_crc32 = crc32  # ISA-L's CRC-32: the same checksum as zlib's, several times faster


class ChunkHeader(NamedTuple):
    """A parsed chunk header (the Bloom bytes are kept raw)."""

    chunk_type: int
    flags: int
    hash_id: int
    bloom_size: int
    first_offset: int
    record_count: int
    timestamp_ms: int
    data_length: int
    raw_length: int
    data_crc: int
    header_crc: int
    extra_size: int = 0

    @property
    def meta_size(self) -> int:
        """Bloom + extra bytes: what sits between the fixed header and the data."""
        return self.bloom_size + self.extra_size

    @property
    def total_size(self) -> int:
        return HEADER_SIZE + self.bloom_size + self.extra_size + self.data_length


_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def _filter_blob(values: tuple[str, ...]) -> bytes:
    if len(values) == 1:
        return values[0].encode()
    parts = []
    for v in values:
        raw = v.encode()
        if len(raw) > 0xFFFF:
            raise StorageError(f"filter value of {len(raw)} bytes (at most 65535 with several)")
        parts.append(_U16.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


class _Prefixes(dict[int, bytes]):
    """Body length -> its u32 osiris entry prefix, packed once (bodies repeat sizes)."""

    def __missing__(self, length: int) -> bytes:
        prefix = self[length] = _pack_u32(length)
        return prefix


_PREFIXES = _Prefixes()


def _records(
    messages: Sequence[Message], parts: list[bytes], entries: list[bytes] | None
) -> tuple[bytes, set[str]]:
    """THE per-record step of both data layouts. Returns the record table (an ``ENTRY`` per
    record) and the batch's filter values (the Bloom's; "" when a record has none). Appends
    each record's fields (filter bytes, exchange, routing key, properties; empty ones left
    out) to ``parts``, and its body after them (``entries`` None: the record-table layout)
    or as an osiris entry (u32 length, body) to ``entries``."""
    lengths: list[int] = []
    values: set[str] = set()
    ext = lengths.extend
    add = parts.extend
    table = entries is None
    add_entry = parts.extend if entries is None else entries.extend
    prefixes = _PREFIXES
    if not table and len(prefixes) > 4096:
        prefixes.clear()
    encoded: dict[str, bytes] = {}  # filter value -> its bytes (a batch repeats a few values)
    unfiltered = False  # a record without a filter value
    for fv, ex, rk, props, body, kind in messages:
        if not ex and not rk:  # as stream-protocol publishes are: HOT PATH
            if not fv:
                unfiltered = True
                ext((kind and _KIND_BIT, 0, 0, 0, len(props), len(body)))
                if table:
                    add((props, body))
                else:
                    if props:
                        parts.append(props)
                    add_entry((prefixes[len(body)], body))
                continue
            if len(fv) == 1:
                value = fv[0]
                fb = encoded.get(value)
                if fb is None:
                    fb = encoded[value] = value.encode()
                ext((_KIND_BIT | 1 if kind else 1, len(fb), 0, 0, len(props), len(body)))
                if table:
                    add((fb, props, body))
                else:
                    add((fb, props))
                    add_entry((prefixes[len(body)], body))
                continue
        if not fv:
            unfiltered = True
            fb = b""
        elif len(fv) == 1:
            values.add(fv[0])
            fb = fv[0].encode()
        else:
            values.update(fv)
            fb = _filter_blob(fv)
        exb = ex.encode()
        rkb = rk.encode()
        ext(
            (
                (len(fv) | _KIND_BIT) if kind else len(fv),
                len(fb),
                len(exb),
                len(rkb),
                len(props),
                len(body),
            )
        )
        if table:
            add((fb, exb, rkb, props, body))
        else:
            add((fb, exb, rkb, props))
            add_entry((prefixes[len(body)], body))
    if encoded:
        values.update(encoded)
    if unfiltered:
        values.add("")
    try:
        return struct.pack(">" + "BIBBII" * len(messages), *lengths), values
    except struct.error as exc:
        raise StorageError(f"message field too long for the chunk format: {exc}") from exc


def _header(
    flags: int,
    first_offset: int,
    count: int,
    timestamp_ms: int,
    data_length: int,
    raw_length: int,
    data_crc: int,
    bloom_bytes: bytes,
    extra: bytes,
) -> bytes:
    """THE header packer of both layouts: header, its CRC, the Bloom bytes and the extra blob
    (a version 2 chunk when there is one)."""
    head = _pack_header_body(
        MAGIC,
        VERSION_EXTRA if extra else VERSION,
        TYPE_USER,
        flags,
        HASH_MMH3,
        len(bloom_bytes),
        first_offset,
        count,
        timestamp_ms,
        data_length,
        raw_length,
        data_crc,
        len(extra),
    )
    meta = bloom_bytes + extra
    return head + _pack_u32(_crc32(meta, _crc32(head))) + meta


def encode_chunk(
    messages: Sequence[Message],
    first_offset: int,
    timestamp_ms: int,
    bloom_size: int,
    compressor: Callable[[bytes], bytes] | None = None,
    extra: bytes = b"",
) -> list[bytes]:
    """Encode a batch as one chunk; returns buffers for one ``os.writev``.

    A non-empty ``extra`` makes a version 2 chunk carrying it after the Bloom bytes.
    """
    n = len(messages)
    if n == 0:
        raise ValueError("a chunk needs at least one message")
    if len(extra) > MAX_EXTRA:
        raise StorageError(f"chunk extra blob of {len(extra)} bytes (at most {MAX_EXTRA})")
    parts: list[bytes] = []
    if compressor is None and OSIRIS_LAYOUT and all(map(_kind_of, messages)):
        entries: list[bytes] = []
        table, values = _records(messages, parts, entries)
        return _osiris_data(
            parts,
            entries,
            table,
            n,
            first_offset,
            timestamp_ms,
            _bloom_bytes(values, bloom_size),
            extra,
        )
    table, values = _records(messages, parts, None)
    bloom_bytes = _bloom_bytes(values, bloom_size)
    body = b"".join(parts)
    raw_length = len(table) + len(body)
    flags = 0
    if compressor is not None:
        packed = compressor(table + body)
        if len(packed) < raw_length:
            flags = FLAG_ZSTD
            buffers = [packed]
    if not flags:
        buffers = [table, body]
    data_length = len(buffers[0]) + (len(buffers[1]) if len(buffers) > 1 else 0)
    crc = _crc32(buffers[0])
    if len(buffers) > 1:
        crc = _crc32(buffers[1], crc)
    head = _header(
        flags, first_offset, n, timestamp_ms, data_length, raw_length, crc, bloom_bytes, extra
    )
    return [head, *buffers]


def _osiris_data(
    parts: list[bytes],
    entries: list[bytes],
    table: bytes,
    n: int,
    first_offset: int,
    timestamp_ms: int,
    bloom_bytes: bytes,
    extra: bytes,
) -> list[bytes]:
    """``encode_chunk`` for a batch of stream-protocol records without compression: the data
    is ``entries | record table | per record filter bytes, exchange, routing key, properties
    | u32 entries length | u32 entries CRC``, where ``entries`` is one simple osiris entry
    (``u32 length | body``) per record: the data section of the chunk a Deliver carries, with
    its CRC, so the stream-protocol consume path sends stored bytes (docs/storage-format.md).
    """
    entry_list = b"".join(entries)
    entries_crc = _crc32(entry_list)
    rest = b"".join(parts) + _TRAILER.pack(len(entry_list), entries_crc)
    crc = _crc32(rest, _crc32(table, entries_crc))  # one pass over the entries
    data_length = len(entry_list) + len(table) + len(rest)
    head = _header(
        FLAG_OSIRIS,
        first_offset,
        n,
        timestamp_ms,
        data_length,
        data_length,
        crc,
        bloom_bytes,
        extra,
    )
    return [head, entry_list, table, rest]


def _bloom_bytes(values: set[str], bloom_size: int) -> bytes:
    """The Bloom bytes of a chunk whose records carry these filter values (none: empty)."""
    if not values or values == {""}:
        return b""
    bloom = BloomFilter(bloom_size)
    for v in values:
        bloom.add(v)
    return bloom.to_bytes()


def osiris_entries(data: bytes) -> tuple[int, int]:
    """(length, CRC-32) of the entry list that starts the data of a ``FLAG_OSIRIS`` chunk."""
    if len(data) < _TRAILER.size:
        raise StorageError(f"osiris-layout data of {len(data)} bytes has no trailer")
    length, crc = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    return length, crc


def osiris_to_table(data: bytes, count: int) -> bytes:
    """The data of a ``FLAG_OSIRIS`` chunk in the record-table layout (``decode_records``,
    Spark, the tools): the record table, then each record's fields and body."""
    try:
        elen, _ = osiris_entries(data)
        table_len = count * ENTRY_SIZE
        table = data[elen : elen + table_len]
        p = elen + table_len
        e = 0
        parts: list[bytes] = [table]
        add = parts.append
        unpack = _U32.unpack_from
        for _nf, fl, el, rl, pl, bl in ENTRY.iter_unpack(table):
            q = p + fl + el + rl + pl
            add(data[p:q])
            if unpack(data, e)[0] != bl:
                raise StorageError(f"entry at byte {e} does not hold {bl} bytes")
            add(data[e + 4 : e + 4 + bl])
            e += 4 + bl
            p = q
    except (struct.error, IndexError) as error:
        raise StorageError(f"bad osiris-layout data: {error}") from error
    if e != elen or p != len(data) - _TRAILER.size:
        raise StorageError(f"osiris-layout data does not add up ({e}/{elen}, {p}/{len(data)})")
    return b"".join(parts)


_unpack_header = HEADER.unpack_from

# the 14 header fields in byte order (see HEADER), the extra length 0 in a version 1 chunk
HeaderFields = tuple[bytes, int, int, int, int, int, int, int, int, int, int, int, int, int]


def unpack_header(buf: bytes, offset: int = 0) -> HeaderFields | None:
    """THE chunk header parser; None when the magic or the version is wrong.

    ``buf[offset:]`` must hold ``HEADER_SIZE`` bytes. HOT PATH: the reader calls it once per
    chunk it looks at and unpacks the plain tuple (no object per chunk); ``parse_header``
    names the fields for everyone else. The header CRC is checked once the Bloom bytes and
    the extra blob are at hand (``header_ok``).
    """
    fields = cast(HeaderFields, _unpack_header(buf, offset))
    if fields[0] != MAGIC:
        return None
    version = fields[1]
    if version == VERSION_EXTRA:
        return fields
    if version == VERSION:
        return (*fields[:12], 0, fields[13])  # bytes 40..43 are reserved in version 1
    return None


def parse_header(buf: bytes, offset: int = 0) -> ChunkHeader | None:
    """The header at ``buf[offset:]`` with named fields; None when it is short or its magic
    or version is wrong (``unpack_header``)."""
    if len(buf) - offset < HEADER_SIZE:
        return None
    fields = unpack_header(buf, offset)
    if fields is None:
        return None
    _, _, ctype, flags, hid, bsize, first, count, ts, dlen, rlen, dcrc, xlen, hcrc = fields
    return ChunkHeader(ctype, flags, hid, bsize, first, count, ts, dlen, rlen, dcrc, hcrc, xlen)


def header_ok(header: ChunkHeader, buf: bytes, offset: int = 0) -> bool:
    """True when ``buf[offset:]`` holds the whole header + Bloom + extra and its CRC matches."""
    end = offset + HEADER_SIZE + header.meta_size
    if len(buf) < end:
        return False
    crc = _crc32(buf[offset + HEADER_SIZE : end], _crc32(buf[offset : offset + HEADER_SIZE - 4]))
    return crc == header.header_crc


def raw_data(header: ChunkHeader, data: bytes) -> bytes:
    """The uncompressed record table + payloads of a chunk."""
    if header.flags & FLAG_OSIRIS:
        return osiris_to_table(data, header.record_count)
    return decompress(data, header.raw_length) if header.flags & FLAG_ZSTD else data


def decompress(data: bytes, raw_length: int) -> bytes:
    """The data of a chunk whose flags have ``FLAG_ZSTD``."""
    import zstandard

    out: bytes = zstandard.ZstdDecompressor().decompress(data, max_output_size=raw_length)
    return out


def _split_filters(blob: bytes, count: int) -> tuple[str, ...]:
    out = []
    p = 0
    for _ in range(count):
        (n,) = _U16.unpack_from(blob, p)
        out.append(blob[p + 2 : p + 2 + n].decode())
        p += 2 + n
    return tuple(out)


_new_record = tuple.__new__


def check_record_table(raw: bytes, count: int) -> str | None:
    """Why the record table of uncompressed chunk data is inconsistent, or None when it is not.

    The lengths in the table must add up to exactly the data that follows it.
    """
    table_len = count * ENTRY_SIZE
    if len(raw) < table_len:
        return f"record table of {count} entries is longer than the {len(raw)} data bytes"
    described = table_len + sum(
        fl + el + rl + pl + bl for _, fl, el, rl, pl, bl in ENTRY.iter_unpack(raw[:table_len])
    )
    if described != len(raw):
        return f"record table describes {described} bytes, the data holds {len(raw)}"
    return None


def decode_records(
    raw: bytes,
    count: int,
    first_offset: int,
    timestamp_ms: int,
    start_offset: int,
    spec: FilterSpec | None,
    osiris: bool = False,
) -> tuple[list[Record], int]:
    """Decode the records at or above ``start_offset`` that match ``spec``; ``osiris``: the
    data is in the osiris layout (``FLAG_OSIRIS``), else in the record-table layout.

    Returns (records, number of records rejected by the spec). Data whose record table does
    not fit it (a torn or foreign chunk that passed its CRC) raises ``StorageError``.
    """
    try:
        if osiris:
            return _decode_osiris(raw, count, first_offset, timestamp_ms, start_offset, spec)
        return _decode_records(raw, count, first_offset, timestamp_ms, start_offset, spec)
    except (struct.error, IndexError, UnicodeDecodeError) as error:
        raise StorageError(f"chunk at offset {first_offset}: bad record data: {error}") from error


def length_prefixed_runs(
    raw: bytes, count: int, skip: int, budget: int, max_records: int
) -> list[tuple[int, bytes]] | None:
    """The bodies of records ``skip ..`` of a chunk's data, each after its length as a
    big-endian u32 (the stream protocol's simple entries), cut into runs of at most
    ``max_records`` records and ``budget`` bytes (a longer record goes alone): a list of
    (records in the run, its bytes). None when one of them is not a KIND_STREAM record (its
    body alone is not what a stream consumer receives).

    No Record objects: one slice and one length per record (the stream-protocol Deliver
    path, which sends stored stream-protocol payloads byte for byte).
    """
    runs: list[tuple[int, bytes]] = []
    try:
        table_len = count * ENTRY_SIZE
        p = table_len
        parts: list[bytes] = []
        add = parts.append
        pack = _pack_u32
        size = 0
        n = 0
        for i, (nf, fl, el, rl, pl, bl) in enumerate(ENTRY.iter_unpack(raw[:table_len])):
            if not nf & _KIND_BIT:
                return None
            s = p + fl + el + rl + pl
            p = s + bl
            if i < skip:
                continue
            if n and (size + 4 + bl > budget or n >= max_records):
                runs.append((n, b"".join(parts)))
                parts.clear()
                size = n = 0
            add(pack(bl))
            add(raw[s:p])
            size += 4 + bl
            n += 1
    except (struct.error, IndexError) as error:
        raise StorageError(f"bad record data: {error}") from error
    if p != len(raw):
        raise StorageError(f"record table describes {p} bytes, the data holds {len(raw)}")
    if n:
        runs.append((n, b"".join(parts)))
    return runs


def table_runs(raw: bytes, count: int, skip: int, budget: int) -> list[tuple[int, int, bytes]]:
    """Records ``skip ..`` of a chunk's data (record-table layout) cut into runs of at most
    ``budget`` bytes (a longer record goes alone), each itself in the record-table layout:
    (index of its first record, records in the run, its bytes).

    The stream protocol's stored-chunk Deliver (``sievemq-stored-chunks``): a columnar
    reader (Spark over the network) decodes each run as it would a chunk read from disk.
    A run that is the whole chunk is the stored bytes, not a copy.
    """
    table_len = count * ENTRY_SIZE
    if skip == 0 and len(raw) <= budget:
        return [(0, count, raw)]
    sizes: list[int] = []
    try:
        for _, fl, el, rl, pl, bl in ENTRY.iter_unpack(raw[:table_len]):
            sizes.append(fl + el + rl + pl + bl)
    except struct.error as error:
        raise StorageError(f"bad record data: {error}") from error
    if table_len + sum(sizes) != len(raw):
        raise StorageError(
            f"record table describes {table_len + sum(sizes)} bytes, the data holds {len(raw)}"
        )
    runs: list[tuple[int, int, bytes]] = []
    payload = table_len + sum(sizes[:skip])
    i = skip
    while i < count:
        j = i
        size = 0
        while j < count and (j == i or size + ENTRY_SIZE + sizes[j] <= budget):
            size += ENTRY_SIZE + sizes[j]
            j += 1
        body = sum(sizes[i:j])
        table = raw[i * ENTRY_SIZE : j * ENTRY_SIZE]
        runs.append((i, j - i, table + raw[payload : payload + body]))
        payload += body
        i = j
    return runs


def osiris_runs(
    data: bytes, count: int, skip: int, budget: int, max_records: int
) -> list[tuple[int, memoryview, int]]:
    """``length_prefixed_runs`` for the data of a ``FLAG_OSIRIS`` chunk: (records, bytes of
    their entries, CRC-32 of those bytes) per run, the bytes a view of ``data`` (no copy).
    The whole entry list, when it fits, comes with the CRC stored at write time."""
    elen, ecrc = osiris_entries(data)
    view = memoryview(data)
    if skip == 0 and elen <= budget and count <= max_records:
        return [(count, view[:elen], ecrc)]
    runs: list[tuple[int, memoryview, int]] = []
    unpack = _U32.unpack_from
    p = start = n = 0
    try:
        for i in range(count):
            (bl,) = unpack(data, p)
            if i < skip:
                p += 4 + bl
                start = p
                continue
            if n and (p + 4 + bl - start > budget or n >= max_records):
                piece = view[start:p]
                runs.append((n, piece, _crc32(piece)))
                start = p
                n = 0
            p += 4 + bl
            n += 1
    except struct.error as error:
        raise StorageError(f"bad osiris entry list: {error}") from error
    if p != elen:
        raise StorageError(f"osiris entries add up to {p} bytes, the list holds {elen}")
    if n:
        piece = view[start:p]
        runs.append((n, piece, _crc32(piece)))
    return runs


def _decode_records(
    raw: bytes,
    count: int,
    first_offset: int,
    timestamp_ms: int,
    start_offset: int,
    spec: FilterSpec | None,
) -> tuple[list[Record], int]:
    table_len = count * ENTRY_SIZE
    p = table_len
    out: list[Record] = []
    append = out.append
    rejected = 0
    offset = first_offset
    fcache: dict[bytes, tuple[str, ...]] = {}
    matches = spec.matches if spec is not None else None
    for nf, fl, el, rl, pl, bl in ENTRY.iter_unpack(raw[:table_len]):
        if offset < start_offset:
            p += fl + el + rl + pl + bl
            offset += 1
            continue
        kind = nf >> 7
        nf &= _COUNT_MASK
        if nf == 0:
            fv: tuple[str, ...] = ()
        else:
            fb = raw[p : p + fl]
            cached = fcache.get(fb)
            if cached is None:
                cached = (fb.decode(),) if nf == 1 else _split_filters(fb, nf)
                fcache[fb] = cached
            fv = cached
        p += fl
        if matches is not None and not matches(fv):
            p += el + rl + pl + bl
            rejected += 1
            offset += 1
            continue
        q = p + el
        r = q + rl
        s = r + pl
        e = s + bl
        ex = raw[p:q].decode()
        rk = raw[q:r].decode()
        append(_new_record(Record, (offset, timestamp_ms, fv, ex, rk, raw[r:s], raw[s:e], kind)))
        p = e
        offset += 1
    return out, rejected


def _decode_osiris(
    raw: bytes, count: int, first: int, ts: int, start: int, spec: FilterSpec | None
) -> tuple[list[Record], int]:
    """``_decode_records`` for the osiris layout: the fields after the record table, the
    bodies in the entries at the start (no rebuilt record table: exact stream filters)."""
    elen, _ = osiris_entries(raw)
    p = elen + count * ENTRY_SIZE  # filter bytes, exchange, routing key, properties
    e = 4  # the body of each record, after its entry's length
    kept: list[Record] = []
    rejected = 0
    matches = None if spec is None else spec.matches
    for i, (nf, fl, el, rl, pl, bl) in enumerate(ENTRY.iter_unpack(raw[elen:p])):
        q = p + fl
        r = q + el + rl
        end = r + pl
        if first + i >= start:
            nf &= _COUNT_MASK
            fv: tuple[str, ...] = ()
            if nf == 1:
                fv = (raw[p:q].decode(),)
            elif nf:
                fv = _split_filters(raw[p:q], nf)
            if matches is None or matches(fv):
                ex = raw[q : q + el].decode()
                rk = raw[q + el : r].decode()
                fields = (first + i, ts, fv, ex, rk, raw[r:end], raw[e : e + bl], KIND_STREAM)
                kept.append(_new_record(Record, fields))
            else:
                rejected += 1
        p = end
        e += 4 + bl
    if e - 4 != elen or p != len(raw) - _TRAILER.size:
        raise StorageError(f"osiris-layout data does not add up ({e - 4}/{elen}, {p}/{len(raw)})")
    return kept, rejected
