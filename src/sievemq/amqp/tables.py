"""AMQP field tables and arrays from the wire: checked and decoded without recursion.

Nothing from the wire is unbounded: every table is walked with an explicit stack (no Python
recursion, so no RecursionError however deep the input), in time linear in its size, and
held to ``TableLimits`` (nesting depth, entries per table, elements per field array). A
limit exceeded is 406 PRECONDITION_FAILED naming the limit's setting; a malformed table is
501 FRAME_ERROR. RabbitMQ has no such limits (its frame_max bounds a table's bytes only);
SieveMQ's defaults are far above what real clients send (x-death nests three levels).

``scan_table`` checks and skips (the publish hot path); ``decode_table`` /
``decode_value`` build the same Python values pamqp's decoder returns (str or bytes for a
longstr, bytes for 'x', Decimal, datetime in UTC), except that a timestamp no datetime can
hold stays its integer instead of raising. pamqp's own decoder copies the rest of the frame
for every entry (quadratic) and recurses per level, so the gateway decodes tables here.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from dataclasses import dataclass
from typing import Any, Final

from sievemq.amqp import errors


@dataclass(frozen=True)
class TableLimits:
    """Limits on one field table from the wire (settings ``max_table_depth`` ... )."""

    max_depth: int = 32  # nested tables and arrays, the outer table counting as 1
    max_entries: int = 4096  # entries of one table
    max_array_length: int = 4096  # elements of one field array


DEFAULT_LIMITS: Final = TableLimits()
# for data already checked on the way in (stored properties): structure only
UNLIMITED: Final = TableLimits(2**62, 2**62, 2**62)

_I = struct.Struct(">I")
TYPE_TABLE: Final = 0x46  # F
TYPE_ARRAY: Final = 0x41  # A
TYPE_LONGSTR: Final = 0x53  # S
TYPE_BYTES: Final = 0x78  # x

# size of fixed-width field values by type octet (pamqp's TABLE_MAPPING)
FIXED_SIZES: Final = {
    0x74: 1,  # t boolean
    0x62: 1,  # b short-short int
    0x42: 1,  # B short-short uint
    0x73: 2,  # s short int
    0x75: 2,  # u short uint
    0x49: 4,  # I long int
    0x69: 4,  # i long uint
    0x6C: 8,  # l long-long int
    0x4C: 8,  # L long-long (pamqp: signed)
    0x66: 4,  # f float
    0x64: 8,  # d double
    0x44: 5,  # D decimal
    0x54: 8,  # T timestamp
    0x56: 0,  # V void
    0x00: 0,  # seen in the wild, pamqp reads it as void
}
# the same as a tuple indexed by type octet, for the table loops: the size of a fixed-width
# value, SIZED for a 4-byte length + bytes (S, x), OTHER for a table, an array or unknown
SIZED: Final = -1
OTHER: Final = -2
VALUE_SIZES: Final = tuple(
    FIXED_SIZES.get(kind, SIZED if kind in (TYPE_LONGSTR, TYPE_BYTES) else OTHER)
    for kind in range(256)
)


def _depth_error(what: str, limits: TableLimits) -> errors.AMQPError:
    return errors.PreconditionFailed(
        f"{what} nested deeper than {limits.max_depth} levels (limit max_table_depth)"
    )


def count_error(what: str, in_table: bool, limits: TableLimits) -> errors.AMQPError:
    if in_table:
        return errors.PreconditionFailed(
            f"{what} has a table of more than {limits.max_entries} entries "
            "(limit max_table_entries)"
        )
    return errors.PreconditionFailed(
        f"{what} has a field array of more than {limits.max_array_length} elements "
        "(limit max_array_length)"
    )


def _open(data: bytes, pos: int, end: int, what: str, kind: str) -> int:
    """End offset of the table/array whose 4-byte length is at ``pos`` (checked to fit)."""
    if pos + 4 > end:
        raise errors.FrameError(f"{what}: field {kind} truncated")
    stop: int = pos + 4 + _I.unpack_from(data, pos)[0]
    if stop > end:
        raise errors.FrameError(f"{what}: field {kind} longer than its container")
    return stop


def scan_table(
    data: bytes,
    pos: int,
    end: int,
    limits: TableLimits = DEFAULT_LIMITS,
    what: str = "field table",
) -> int:
    """Offset after the field table (length prefix included) at ``pos``; checks it all.

    Raises 501 FrameError when malformed, 406 PreconditionFailed past a limit.
    """
    return _scan(data, pos + 4, _open(data, pos, end, what, "table"), True, limits, what, 0)


def skip_value(
    data: bytes,
    pos: int,
    end: int,
    limits: TableLimits = UNLIMITED,
    what: str = "field value",
    depth: int = 0,
) -> int:
    """Offset after the field value (type octet first) at ``pos``; checks it, no recursion.

    ``depth``: the nesting level of the table or array holding the value (a container
    value is one level deeper, checked against ``limits.max_depth``)."""
    if pos >= end:
        raise errors.FrameError(f"{what}: field value truncated")
    kind = data[pos]
    if kind in (TYPE_TABLE, TYPE_ARRAY):
        if depth + 1 > limits.max_depth:
            raise _depth_error(what, limits)
        kind_name = "table" if kind == TYPE_TABLE else "array"
        stop = _open(data, pos + 1, end, what, kind_name)
        return _scan(data, pos + 5, stop, kind == TYPE_TABLE, limits, what, depth)
    return _scalar(kind, data, pos + 1, end, what)[1]


def _scan(
    data: bytes,
    pos: int,
    table_end: int,
    root_is_table: bool,
    limits: TableLimits,
    what: str,
    base: int,
) -> int:
    """Check the entries of the container ending at ``table_end`` (``base`` levels below
    the outer table); returns ``table_end``."""
    fixed = FIXED_SIZES
    unpack = _I.unpack_from
    max_entries, max_elements, max_depth = (
        limits.max_entries,
        limits.max_array_length,
        limits.max_depth,
    )
    stack: list[tuple[int, bool, int]] = []  # the enclosing containers: (end, is table, count)
    stop, in_table, count = table_end, root_is_table, 0
    while True:
        if pos >= stop:
            if pos != stop:
                raise errors.FrameError(f"{what}: field value longer than its container")
            if not stack:
                return table_end
            stop, in_table, count = stack.pop()
            continue
        count += 1
        if in_table:
            if count > max_entries:
                raise count_error(what, True, limits)
            pos += 1 + data[pos]  # the key
            if pos >= stop:
                raise errors.FrameError(f"{what}: field table entry truncated")
        elif count > max_elements:
            raise count_error(what, False, limits)
        kind = data[pos]
        size = fixed.get(kind)
        if size is not None:
            pos += 1 + size
        elif kind in (TYPE_LONGSTR, TYPE_BYTES):
            if pos + 5 > stop:
                raise errors.FrameError(f"{what}: field value truncated")
            pos += 5 + unpack(data, pos + 1)[0]
        elif kind in (TYPE_TABLE, TYPE_ARRAY):
            if len(stack) + 2 + base > max_depth:
                raise _depth_error(what, limits)
            inner = _open(data, pos + 1, stop, what, "table" if kind == TYPE_TABLE else "array")
            stack.append((stop, in_table, count))
            stop, in_table, count = inner, kind == TYPE_TABLE, 0
            pos += 5
        else:
            raise errors.FrameError(f"{what}: unknown field value type {bytes((kind,))!r}")


_SCALARS: Final = {
    0x74: struct.Struct(">?"),
    0x62: struct.Struct(">b"),
    0x42: struct.Struct(">B"),
    0x73: struct.Struct(">h"),
    0x75: struct.Struct(">H"),
    0x49: struct.Struct(">i"),
    0x69: struct.Struct(">I"),
    0x6C: struct.Struct(">q"),
    0x4C: struct.Struct(">q"),
    0x66: struct.Struct(">f"),
    0x64: struct.Struct(">d"),
}
_DECIMAL = struct.Struct(">BI")
_TIMESTAMP = struct.Struct(">Q")
_UTC = datetime.UTC


def _timestamp(raw: int) -> datetime.datetime | int:
    seconds: float = raw / 1000.0 if raw > 0xFFFFFFFF else raw  # pamqp: milliseconds past 2106
    try:
        return datetime.datetime.fromtimestamp(seconds, tz=_UTC)
    except (OverflowError, ValueError, OSError):
        return raw  # no datetime holds it: the number as sent


def _scalar(kind: int, data: bytes, pos: int, stop: int, what: str) -> tuple[Any, int]:
    """(value, offset after it) of a non-container field value whose type octet was read."""
    codec = _SCALARS.get(kind)
    if codec is not None:
        after = pos + codec.size
        if after > stop:
            raise errors.FrameError(f"{what}: field value truncated")
        value = codec.unpack_from(data, pos)[0]
        return (bool(value) if kind == 0x74 else value), after
    if kind in (TYPE_LONGSTR, TYPE_BYTES):
        if pos + 4 > stop:
            raise errors.FrameError(f"{what}: field value truncated")
        after = pos + 4 + _I.unpack_from(data, pos)[0]
        if after > stop:
            raise errors.FrameError(f"{what}: field value longer than its container")
        raw = bytes(data[pos + 4 : after])
        if kind == TYPE_BYTES:
            return raw, after
        try:
            return raw.decode("utf-8"), after
        except UnicodeDecodeError:
            return raw, after  # as pamqp: a longstr that is not UTF-8 stays bytes
    if kind == 0x44:
        if pos + 5 > stop:
            raise errors.FrameError(f"{what}: field value truncated")
        places, raw_int = _DECIMAL.unpack_from(data, pos)
        return decimal.Decimal(raw_int) * (decimal.Decimal(10) ** -places), pos + 5
    if kind == 0x54:
        if pos + 8 > stop:
            raise errors.FrameError(f"{what}: field value truncated")
        return _timestamp(_TIMESTAMP.unpack_from(data, pos)[0]), pos + 8
    if kind == 0x56 or kind == 0x00:
        return None, pos
    raise errors.FrameError(f"{what}: unknown field value type {bytes((kind,))!r}")


def decode_table(
    data: bytes,
    pos: int = 0,
    end: int | None = None,
    limits: TableLimits = DEFAULT_LIMITS,
    what: str = "field table",
) -> tuple[dict[str, Any], int]:
    """(table, offset after it) for the field table (length prefix included) at ``pos``."""
    stop = _open(data, pos, len(data) if end is None else end, what, "table")
    root: dict[str, Any] = {}
    _fill(data, pos + 4, stop, root, limits, what)
    return root, stop


def decode_value(
    data: bytes, pos: int, end: int, limits: TableLimits = DEFAULT_LIMITS, what: str = "value"
) -> tuple[Any, int]:
    """(value, offset after it) for the field value (type octet first) at ``pos``."""
    if pos >= end:
        raise errors.FrameError(f"{what}: field value truncated")
    kind = data[pos]
    if kind not in (TYPE_TABLE, TYPE_ARRAY):
        return _scalar(kind, data, pos + 1, end, what)
    stop = _open(data, pos + 1, end, what, "table" if kind == TYPE_TABLE else "array")
    container: dict[str, Any] | list[Any] = {} if kind == TYPE_TABLE else []
    _fill(data, pos + 5, stop, container, limits, what)
    return container, stop


def _fill(
    data: bytes,
    pos: int,
    stop: int,
    root: dict[str, Any] | list[Any],
    limits: TableLimits,
    what: str,
) -> None:
    """Decode the entries between ``pos`` and ``stop`` into ``root``, depth-first, no recursion."""
    stack: list[tuple[int, dict[str, Any] | list[Any], int]] = []
    container, count = root, 0
    while True:
        if pos >= stop:
            if pos != stop:
                raise errors.FrameError(f"{what}: field value longer than its container")
            if not stack:
                return
            stop, container, count = stack.pop()
            continue
        count += 1
        key = ""
        if isinstance(container, dict):
            if count > limits.max_entries:
                raise count_error(what, True, limits)
            key_end = pos + 1 + data[pos]
            if key_end >= stop:
                raise errors.FrameError(f"{what}: field table entry truncated")
            try:
                key = bytes(data[pos + 1 : key_end]).decode("utf-8")
            except UnicodeDecodeError:
                raise errors.FrameError(f"{what}: a field table key is not UTF-8") from None
            pos = key_end
        elif count > limits.max_array_length:
            raise count_error(what, False, limits)
        kind = data[pos]
        if kind in (TYPE_TABLE, TYPE_ARRAY):
            if len(stack) + 2 > limits.max_depth:
                raise _depth_error(what, limits)
            inner_stop = _open(
                data, pos + 1, stop, what, "table" if kind == TYPE_TABLE else "array"
            )
            inner: dict[str, Any] | list[Any] = {} if kind == TYPE_TABLE else []
            if isinstance(container, dict):
                container[key] = inner
            else:
                container.append(inner)
            stack.append((stop, container, count))
            stop, container, count = inner_stop, inner, 0
            pos += 5
            continue
        value, pos = _scalar(kind, data, pos + 1, stop, what)
        if isinstance(container, dict):
            container[key] = value
        else:
            container.append(value)


__all__ = [
    "DEFAULT_LIMITS",
    "FIXED_SIZES",
    "OTHER",
    "SIZED",
    "TYPE_ARRAY",
    "TYPE_BYTES",
    "TYPE_LONGSTR",
    "TYPE_TABLE",
    "UNLIMITED",
    "VALUE_SIZES",
    "TableLimits",
    "decode_table",
    "decode_value",
    "scan_table",
    "skip_value",
]
