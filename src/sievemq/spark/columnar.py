"""Decode a whole chunk into Arrow columns at once (executor side, hot path).

A chunk's data is a table of 15-byte entries followed by the record fields back to back
(docs/storage-format.md). Strided slices of the entry table copy its big-endian lengths into a
little-endian int32 buffer, six slots per record (``_spread``); Arrow's cumulative sum of it
gives the offsets of the records' fields ``[-, filter blob, exchange, routing key, properties,
body]``, where the first slot of a chunk spans its record table and the others are empty. The
run is cut into pieces (``_pieces``): a small run is joined into one buffer, in a big one each
chunk of 512 KiB or more stays the bytes storage read (never copied) and smaller neighbours are
joined. Over each piece one binary array of those fields is laid (no copy), and each column is
one ``take`` of every sixth element per piece, done by Arrow in C; no Python object is made per
record except in the rare cases named below.

- Bodies of a big run (``_bodies``): Arrow binary views (length, first 4 bytes, piece, offset)
  point into the pieces, and Arrow's cast to a plain binary array is the bodies' only copy.
  Views hold values of up to 12 bytes inline, so a run with such a body uses ``take``.
- Filter values: a record with one value stores it as the blob itself, so the common case is a
  cast. A chunk holding a record with several values (length-prefixed blob) is split per record.
- ``FilterSpec`` (the consumer's x-stream-filter): evaluated once per distinct blob, then
  gathered with ``take``.
- ``sql``: evaluated per record on a small row view (the gateway's ``sql_predicate``).
- Properties and headers: decoded once per distinct property bytes (``dictionary_encode``),
  only when their columns are asked for.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from itertools import accumulate
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from sievemq.filtering.properties import BASIC_PROPERTY_NAMES, plain_properties
from sievemq.storage import FilterSpec, StorageError
from sievemq.storage.chunk import ENTRY_SIZE
from sievemq.storage.reader import RawChunk

_PER = 6  # elements per record in the interleaved array (count slot + 5 fields)
_FILTER, _EXCHANGE, _ROUTING_KEY, _PROPERTIES, _BODY = 1, 2, 3, 4, 5
_COUNT_MASK = bytes(i & 0x7F for i in range(256))  # drop the record-kind bit
_CACHE_MAX = 4096
_JOIN_BYTES = 1 << 22  # a run with at most this much data is joined into one piece
_PIECE_BYTES = 1 << 19  # smaller chunks are joined with their neighbours into pieces this big
_VIEW_BODY = 256  # mean body length from which the body column is copied from views
_INLINE = 12  # Arrow's binary views hold values of up to 12 bytes inline
# compute functions get Arrow scalars: a Python scalar costs ~0.5 ms per call in pyarrow
# without numpy installed (it tries the numpy import each time)
_ZERO = pa.scalar(0, pa.uint8())
_ONE = pa.scalar(1, pa.uint8())
_INT64 = pa.int64()

Decoded = tuple[tuple[object, ...], list[tuple[str, str | None]]]


class _Row(NamedTuple):
    """What ``sql_predicate`` reads from a stored message."""

    filter_values: tuple[str, ...]
    exchange: str
    routing_key: str
    properties: bytes


def _split(blob: bytes, count: int) -> tuple[str, ...]:
    if count == 0:
        return ()
    if count == 1:
        return (blob.decode(),)
    out = []
    p = 0
    for _ in range(count):
        n = int.from_bytes(blob[p : p + 2], "big")
        out.append(blob[p + 2 : p + 2 + n].decode())
        p += 2 + n
    return tuple(out)


def _spread(out: bytearray, at: int, data: bytes, count: int) -> None:
    """Write the 6 lengths of each of ``count`` records (little-endian int32) at ``out[at:]``.

    Slot 0 (the entry's count byte) holds no bytes, except the chunk's first one, which spans
    the record table; slots 1..5 are the filter blob, exchange, routing key, properties and
    body lengths, copied from the big-endian entries (``>BIBBII``) with strided slices.
    """
    end = at + count * 24
    table_len = count * ENTRY_SIZE
    table = data[:table_len]
    out[at : at + 4] = table_len.to_bytes(4, "little")
    for slot, source in ((1, 1), (4, 7), (5, 11)):  # u32 big-endian -> int32 little-endian
        base = at + slot * 4
        for byte in range(4):
            out[base + byte : end : 24] = table[source + 3 - byte :: ENTRY_SIZE]
    out[at + 8 : end : 24] = table[5::ENTRY_SIZE]  # exchange length (u8)
    out[at + 12 : end : 24] = table[6::ENTRY_SIZE]  # routing key length (u8)


def _int32s(values: Any) -> bytes:
    """The little-endian bytes of a fresh (unsliced) int32 array."""
    data: bytes = values.buffers()[1].to_pybytes()
    return data[: 4 * len(values)]


class _Piece(NamedTuple):
    """Consecutive chunks of a run whose data is one buffer."""

    data: Any  # pa.Buffer
    fields: Any  # binary array: ``_PER`` elements per record over ``data``
    first: int  # its first record in the run
    rows: int
    lo: int  # the wanted rows of the piece: ``[lo, lo + wanted)``
    wanted: int


def _where(chunks: list[RawChunk]) -> str:
    return f"chunks at offsets {chunks[0].first_offset}..{chunks[-1].first_offset}"


def _check_ends(ends: Any, chunks: list[RawChunk]) -> None:
    """Each chunk's lengths must add up to exactly its data."""
    row = 0
    total = 0
    for chunk in chunks:
        row += chunk.records
        total += len(chunk.data)
        described = ends[row * _PER].as_py()
        if described != total:
            raise StorageError(
                f"chunk at offset {chunk.first_offset}: record table describes "
                f"{described - total + len(chunk.data)} bytes, the data holds {len(chunk.data)}"
            )


class ChunkDecoder:
    """Chunks -> RecordBatches of ``schema``'s columns (one decoder per partition)."""

    def __init__(
        self,
        schema: Any,
        vhost: str,
        stream: str,
        spec: FilterSpec | None = None,
        predicate: Callable[[Any], bool] | None = None,
    ) -> None:
        self.schema = schema
        self.names: list[str] = list(schema.names)
        self.vhost = vhost
        self.stream = stream
        self.spec = spec
        self.predicate = predicate
        self._indices: dict[int, Any] = {}
        self._props: dict[bytes, Decoded] = {}
        self._ranges: Any = None
        self.kept = 0
        self.rejected = 0

    # -- cached helpers ------------------------------------------------------------------

    def _index(self, rows: int, field: int) -> Any:
        """Indices ``field, field + 6, ...`` of ``rows`` records (slices of one cached array)."""
        got = self._indices.get(field)
        if got is None or len(got) < rows:
            size = max(rows, 2 * len(got) if got is not None else 16384)
            got = self._indices[field] = pa.array(range(field, size * _PER, _PER), pa.int32())
        return got.slice(0, rows)

    def _arange(self, count: int) -> Any:
        """int64 ``0 .. count - 1`` (a slice of one cached array)."""
        got = self._ranges
        if got is None or len(got) < count:
            size = max(count, 2 * len(got) if got is not None else 4096)
            got = self._ranges = pa.array(range(size), pa.int64())
        return got.slice(0, count)

    def _decoded(self, raw: bytes) -> Decoded:
        got = self._props.get(raw)
        if got is None:
            try:
                basic, headers = plain_properties(raw)
            except Exception as error:  # FrameError: stored bytes that are no property list
                raise StorageError(f"cannot decode stored message properties: {error}") from None
            got = (tuple(basic[n] for n in BASIC_PROPERTY_NAMES), headers)
            if len(self._props) >= _CACHE_MAX:
                self._props.clear()
            self._props[raw] = got
        return got

    # -- a run of chunks -------------------------------------------------------------------

    def __call__(self, chunks: list[RawChunk], until: int) -> pa.RecordBatch | None:
        """The matching rows of ``chunks`` (from each one's ``start``, below ``until``)."""
        rows = sum(c.records for c in chunks)
        # the lengths of the interleaved array as little-endian int32, after a leading 0
        lengths = bytearray(4 + rows * _PER * 4)
        counts_parts: list[bytes] = []
        offsets: list[Any] = []
        stamps: list[bytes] = []
        lo = hi = -1  # the wanted rows [lo, hi) of the run: contiguous (see below)
        row = 0
        for chunk in chunks:
            data, count, first = chunk.data, chunk.records, chunk.first_offset
            table_len = count * ENTRY_SIZE
            if len(data) < table_len:
                raise StorageError(
                    f"chunk at offset {first}: record table of {count} entries is longer than "
                    f"the {len(data)} data bytes"
                )
            _spread(lengths, 4 + row * _PER * 4, data, count)
            counts_parts.append(data[0:table_len:ENTRY_SIZE].translate(_COUNT_MASK))
            # only the first chunk of a run starts past its first offset (a seek) and only
            # the last one may reach past ``until`` (the reader's bound)
            skip, stop = chunk.start - first, max(0, min(count, until - first))
            if skip < stop:
                if lo < 0:
                    lo = row + skip
                elif row + skip != hi:
                    raise StorageError(f"{_where(chunks)}: the chunks are not one run")
                hi = row + stop
                offsets.append(pc.add(self._arange(stop).slice(skip), pa.scalar(first, _INT64)))
                stamps.append(bytes(array("q", [chunk.timestamp_ms * 1000]) * (stop - skip)))
            row += count
        if lo < 0:
            return None
        n = hi - lo
        sizes = pa.Array.from_buffers(pa.int32(), rows * _PER + 1, [None, pa.py_buffer(lengths)])
        try:
            if pc.min(sizes).as_py() < 0:  # a u32 length past 2**31: no chunk holds that
                raise pa.ArrowInvalid("a field length over 2 GiB")
            ends = pc.cumulative_sum_checked(sizes)
        except pa.ArrowInvalid as error:
            raise StorageError(f"{_where(chunks)}: bad record table: {error}") from None
        _check_ends(ends, chunks)
        pieces = self._pieces(chunks, ends, lo, hi)
        counts = b"".join(counts_parts)[lo:hi]
        taken: dict[int, Any] = {}

        def column(field: int) -> Any:
            """Field ``field`` of the wanted rows: fresh, compact arrays (no slices; Spark's
            JVM side misreads sliced ones)."""
            got = taken.get(field)
            if got is None and field < 0:  # the properties column, dictionary encoded
                got = taken[field] = column(_PROPERTIES).dictionary_encode()
            elif got is None and field == _BODY:
                got = taken[field] = self._bodies(pieces, ends, sizes, rows, lo, n)
            elif got is None:
                got = taken[field] = self._gather(pieces, field)
            return got

        one = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(counts)])
        try:
            blobs = column(_FILTER)
            per_row: list[tuple[str, ...]] | None = None
            if counts.translate(None, b"\x00\x01"):  # a record with several filter values
                per_row = [_split(b, c) for b, c in zip(blobs.to_pylist(), counts, strict=True)]
            mask = self._mask(blobs, counts, one, per_row, column)
            arrays = [
                self._column(name, column, blobs, counts, one, per_row, offsets, stamps, n)
                for name in self.names
            ]
        except (UnicodeDecodeError, pa.ArrowInvalid) as error:
            raise StorageError(f"{_where(chunks)}: bad record data: {error}") from None
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        if mask is not None:
            batch = batch.filter(mask)
        self.kept += batch.num_rows
        self.rejected += n - batch.num_rows
        return batch if batch.num_rows else None

    # -- the run's data, without joining it ------------------------------------------------

    def _pieces(self, chunks: list[RawChunk], ends: Any, lo: int, hi: int) -> list[_Piece]:
        """The run cut into pieces holding rows of ``[lo, hi)``, each piece's interleaved
        fields a binary array over its own bytes. A small run is one piece (joining it costs
        less than a ``take`` per piece); in a bigger one a chunk of ``_PIECE_BYTES`` stands
        alone (its bytes are not copied) and smaller neighbours are joined."""
        pieces: list[_Piece] = []
        group: list[bytes] = []
        row = first = size = 0
        join_all = sum(len(c.data) for c in chunks) <= _JOIN_BYTES
        for chunk in chunks:
            group.append(chunk.data)
            row += chunk.records
            size += len(chunk.data)
            if (join_all or size < _PIECE_BYTES) and chunk is not chunks[-1]:
                continue
            if row > lo and first < hi:
                data = pa.py_buffer(group[0] if len(group) == 1 else b"".join(group))
                count = row - first
                where = ends.slice(first * _PER, count * _PER + 1)
                local = pc.subtract(where, where[0]) if first else where
                fields = pa.Array.from_buffers(
                    pa.binary(), count * _PER, [None, local.buffers()[1], data], offset=0
                )
                a, b = max(lo, first), min(hi, row)
                pieces.append(_Piece(data, fields, first, count, a - first, b - a))
            group = []
            first = row
            size = 0
        return pieces

    def _gather(self, pieces: list[_Piece], field: int) -> Any:
        """Field ``field`` of every wanted row: one ``take`` per piece (one copy)."""
        parts = [p.fields.take(self._index(p.rows, field).slice(p.lo, p.wanted)) for p in pieces]
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)

    def _bodies(
        self, pieces: list[_Piece], ends: Any, sizes: Any, rows: int, lo: int, n: int
    ) -> Any:
        """The body column, copied once: Arrow binary views pointing into the pieces' own
        bytes, cast to a plain binary array. Views inline values of up to 12 bytes, so a run
        holding such a body takes the per-piece ``take`` instead."""
        index = self._index(rows, _BODY).slice(lo, n)
        lengths = sizes.slice(1).take(index)
        least, total = pc.min(lengths).as_py(), pc.sum(lengths).as_py()
        if least <= _INLINE or total < _VIEW_BODY * n:
            return self._gather(pieces, _BODY)
        starts = ends.take(index)  # in the run: each piece's base is subtracted below
        bases = bytearray()
        slots = bytearray()
        prefixes = []
        at = 0
        for slot, p in enumerate(pieces):
            base = ends[p.first * _PER].as_py()
            bases += array("i", [base]) * p.wanted
            slots += array("i", [slot]) * p.wanted
            local = pc.subtract(starts.slice(at, p.wanted), pa.scalar(base, pa.int32()))
            at += p.wanted
            # the first 4 bytes of each body (the view's prefix), gathered from the piece
            spots = pc.add(local.take(self._fours(p.wanted, 0)), self._fours(p.wanted, 1))
            octets = pa.Array.from_buffers(pa.uint8(), len(p.data), [None, p.data])
            prefixes.append(octets.take(spots).buffers()[1].to_pybytes()[: 4 * p.wanted])
        offsets = pc.subtract(
            starts, pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bases)])
        )
        views = bytearray(16 * n)
        for column, data in enumerate(
            (_int32s(lengths), b"".join(prefixes), bytes(slots), _int32s(offsets))
        ):
            for byte in range(4):
                views[column * 4 + byte :: 16] = data[byte::4]
        buffers = [None, pa.py_buffer(views), *(p.data for p in pieces)]
        return pa.Array.from_buffers(pa.binary_view(), n, buffers).cast(pa.binary())

    def _fours(self, count: int, which: int) -> Any:
        """int32 ``0,0,0,0,1,1,1,1,...`` (which 0) or ``0,1,2,3,0,1,2,3,...`` (which 1), 4 per
        record of ``count`` (slices of cached arrays)."""
        key = -1 - which
        got = self._indices.get(key)
        if got is None or len(got) < 4 * count:
            size = max(count, len(got) // 2 if got is not None else 4096)
            if which:
                values = bytes(array("i", range(4)) * size)
            else:
                each = bytes(array("i", range(size)))
                spread = bytearray(16 * size)
                for at in range(0, 16, 4):  # each int32 four times in a row
                    for byte in range(4):
                        spread[at + byte :: 16] = each[byte::4]
                values = bytes(spread)
            got = pa.Array.from_buffers(pa.int32(), 4 * size, [None, pa.py_buffer(values)])
            self._indices[key] = got
        return got.slice(0, 4 * count)

    def _mask(
        self,
        blobs: Any,
        counts: bytes,
        one: Any,
        per_row: list[tuple[str, ...]] | None,
        column: Callable[[int], Any],
    ) -> Any:
        spec, predicate = self.spec, self.predicate
        if spec is None and predicate is None:
            return None
        if spec is not None and per_row is None:
            encoded = blobs.dictionary_encode()
            verdict = pa.array(
                [spec.matches((b.decode(),)) for b in encoded.dictionary.to_pylist()], pa.bool_()
            )
            unfiltered = pa.scalar(spec.match_unfiltered, pa.bool_())
            spec_mask = pc.if_else(pc.equal(one, _ZERO), unfiltered, verdict.take(encoded.indices))
        elif spec is not None:
            assert per_row is not None
            spec_mask = pa.array([spec.matches(fv) for fv in per_row], pa.bool_())
        else:
            spec_mask = None
        if predicate is None:
            return spec_mask
        values = per_row
        if values is None:
            values = [_split(b, c) for b, c in zip(blobs.to_pylist(), counts, strict=True)]
        rows = zip(
            values,
            column(_EXCHANGE).cast(pa.string()).to_pylist(),
            column(_ROUTING_KEY).cast(pa.string()).to_pylist(),
            column(_PROPERTIES).to_pylist(),
            strict=True,
        )
        allowed = spec_mask.to_pylist() if spec_mask is not None else None
        out = [
            (allowed is None or bool(allowed[i])) and predicate(_Row(*row))
            for i, row in enumerate(rows)
        ]
        return pa.array(out, pa.bool_())

    def _column(
        self,
        name: str,
        column: Callable[[int], Any],
        blobs: Any,
        counts: bytes,
        one: Any,
        per_row: list[tuple[str, ...]] | None,
        offsets: list[Any],
        stamps: list[bytes],
        rows: int,
    ) -> Any:
        ftype = self.schema.field(name).type
        if name == "offset":
            return offsets[0] if len(offsets) == 1 else pa.concat_arrays(offsets)
        if name == "timestamp":
            return pa.Array.from_buffers(ftype, rows, [None, pa.py_buffer(b"".join(stamps))])
        if name == "filter_values":
            if per_row is not None:
                return pa.array(per_row, ftype)
            ends = array("i", accumulate(counts, initial=0))
            list_ends = pa.Array.from_buffers(pa.int32(), rows + 1, [None, pa.py_buffer(ends)])
            values = blobs.filter(pc.equal(one, _ONE)).cast(pa.string())
            return pa.ListArray.from_arrays(list_ends, values, type=ftype)
        if name == "filter_value":
            if per_row is not None:
                return pa.array([fv[0] if fv else None for fv in per_row], ftype)
            return pc.if_else(pc.equal(one, _ONE), blobs.cast(pa.string()), pa.scalar(None, ftype))
        if name == "exchange":
            return column(_EXCHANGE).cast(ftype)
        if name == "routing_key":
            return column(_ROUTING_KEY).cast(ftype)
        if name == "body":
            return column(_BODY)
        if name in ("stream", "vhost"):
            value = self.stream if name == "stream" else self.vhost
            return pa.repeat(pa.scalar(value, ftype), rows)
        encoded = column(-1)
        distinct = [self._decoded(raw) for raw in encoded.dictionary.to_pylist()]
        if name == "headers":
            return pa.array([d[1] for d in distinct], ftype).take(encoded.indices)
        children = [
            pa.array([d[0][i] for d in distinct], ftype.field(i).type)
            for i in range(len(BASIC_PROPERTY_NAMES))
        ]
        return pa.StructArray.from_arrays(children, fields=list(ftype)).take(encoded.indices)
