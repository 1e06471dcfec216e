"""Field tables from the wire: same values as pamqp, linear time, named limits, no recursion."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import decode, encode

from sievemq.amqp import errors, tables
from sievemq.amqp.tables import TableLimits

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, width=32),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_tables = st.dictionaries(st.text(max_size=8), _values, max_size=6)


def nested(depth: int) -> bytes:
    """A table nested ``depth`` levels deep (the outer one counts), built without recursion."""
    inner = b"\x01aI\x00\x00\x00\x01"
    table = struct.pack(">I", len(inner)) + inner
    for _ in range(depth - 1):
        entry = b"\x01aF" + table
        table = struct.pack(">I", len(entry)) + entry
    return table


def wide(entries: int) -> bytes:
    body = b"\x01kV" * entries
    return struct.pack(">I", len(body)) + body


def array(elements: int) -> bytes:
    arr = b"V" * elements
    entry = b"\x01aA" + struct.pack(">I", len(arr)) + arr
    return struct.pack(">I", len(entry)) + entry


@given(_tables)
def test_decode_matches_pamqp_and_scan_finds_the_end(table: dict[str, object]) -> None:
    raw = encode.field_table(table) + b"tail"
    end = len(raw) - 4
    assert tables.scan_table(raw, 0, len(raw)) == end
    got, after = tables.decode_table(raw)
    assert after == end
    assert got == decode.field_table(raw[:end])[1]


def test_depth_limit_is_a_406_naming_the_setting() -> None:
    limits = TableLimits(max_depth=5)
    assert tables.scan_table(nested(5), 0, len(nested(5)), limits) == len(nested(5))
    tables.decode_table(nested(5), limits=limits)
    for call in (
        lambda: tables.scan_table(nested(6), 0, len(nested(6)), limits, "headers"),
        lambda: tables.decode_table(nested(6), limits=limits, what="headers"),
    ):
        with pytest.raises(errors.PreconditionFailed) as caught:
            call()
        assert "headers nested deeper than 5 levels (limit max_table_depth)" in str(caught.value)


def test_thousands_of_levels_never_recurse() -> None:
    raw = nested(100_000)
    unlimited = TableLimits(max_depth=10**9)
    assert tables.scan_table(raw, 0, len(raw), unlimited) == len(raw)
    with pytest.raises(errors.PreconditionFailed, match="max_table_depth"):
        tables.decode_table(raw)


def test_entry_and_array_limits() -> None:
    limits = TableLimits(max_entries=10, max_array_length=7)
    tables.scan_table(wide(10), 0, len(wide(10)), limits)
    with pytest.raises(errors.PreconditionFailed, match=r"more than 10 entries.*max_table_entries"):
        tables.scan_table(wide(11), 0, len(wide(11)), limits)
    with pytest.raises(errors.PreconditionFailed, match="max_table_entries"):
        tables.decode_table(wide(11), limits=limits)
    assert tables.decode_table(array(7), limits=limits)[0] == {"a": [None] * 7}
    with pytest.raises(errors.PreconditionFailed, match=r"more than 7 elements.*max_array_length"):
        tables.scan_table(array(8), 0, len(array(8)), limits)
    with pytest.raises(errors.PreconditionFailed, match="max_array_length"):
        tables.decode_table(array(8), limits=limits)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x00\x00",  # length cut
        b"\x00\x00\x00\x09\x01aS\x00\x00\x00\xff",  # longstr past the table
        b"\x00\x00\x00\x03\x01aZ",  # unknown type
        b"\x00\x00\x00\x02\x05a",  # key past the table
        b"\x00\x00\x00\x04\x01aF\x00",  # inner table length cut
        b"\x00\x00\x00\x06\x01aI\x00\x00\x00\x00",  # int past the table
    ],
)
def test_malformed_tables_are_frame_errors(raw: bytes) -> None:
    with pytest.raises(errors.FrameError):
        tables.scan_table(raw, 0, len(raw))
    with pytest.raises(errors.FrameError):
        tables.decode_table(raw)


def test_a_timestamp_no_datetime_holds_stays_a_number() -> None:
    raw = b"\x00\x00\x00\x0b\x01tT" + struct.pack(">Q", 2**64 - 1)
    assert tables.decode_table(raw)[0] == {"t": 2**64 - 1}
