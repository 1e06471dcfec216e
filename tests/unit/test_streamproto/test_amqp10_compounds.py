"""AMQP 1.0 lists, maps and arrays in both widths (one-byte and four-byte size and count),
decoded from bytes written out by hand from the AMQP 1.0 spec (section 1.6), and refused
with a clear error when they are cut short or their size does not match their items."""

from __future__ import annotations

import struct

import pytest

from sievemq.streamproto.amqp10 import Amqp10Error, Symbol, decode_value, encode_value

SMALL_UINT = b"\x52"  # smalluint: one byte follows


def _narrow(code: int, items: bytes, count: int) -> bytes:
    return bytes((code, len(items) + 1, count)) + items


def _wide(code: int, items: bytes, count: int) -> bytes:
    return bytes((code,)) + struct.pack(">II", len(items) + 4, count) + items


ITEMS = SMALL_UINT + b"\x07" + b"\xa1\x02hi" + b"\x40"  # 7, "hi", null


@pytest.mark.parametrize("build, code", [(_narrow, 0xC0), (_wide, 0xD0)])
def test_lists_of_both_widths(build: object, code: int) -> None:
    data = build(code, ITEMS, 3) + b"tail"  # type: ignore[operator]
    assert decode_value(data, 0) == ([7, "hi", None], len(data) - 4)


@pytest.mark.parametrize("build, code", [(_narrow, 0xC1), (_wide, 0xD1)])
def test_maps_of_both_widths(build: object, code: int) -> None:
    items = b"\xa3\x01k" + SMALL_UINT + b"\x01" + b"\xa1\x01s" + b"\x41"
    data = build(code, items, 4)  # type: ignore[operator]
    value, end = decode_value(data, 0)
    assert value == {Symbol("k"): 1, "s": True} and end == len(data)


@pytest.mark.parametrize("build, code", [(_narrow, 0xE0), (_wide, 0xF0)])
def test_arrays_of_both_widths(build: object, code: int) -> None:
    items = SMALL_UINT + b"\x01\x02\x03"  # one constructor, then three bare values
    data = build(code, items, 3)  # type: ignore[operator]
    assert decode_value(data, 0) == ([1, 2, 3], len(data))


def test_a_described_array_is_kept_as_its_raw_bytes() -> None:
    data = _narrow(0xE0, b"\x00" + SMALL_UINT + b"\x09" + SMALL_UINT + b"\x01", 1)
    value, end = decode_value(data, 0)
    assert value.encoded == data and end == len(data)


def test_encoded_compounds_come_back_in_both_widths() -> None:
    small = {"a": [1, "x"], Symbol("b"): None}
    large = {"key": ["v" * 300, list(range(300))]}  # past 255 bytes and 255 items
    for value in (small, large):
        data = encode_value(value)
        assert decode_value(data, 0) == (value, len(data))
    assert encode_value(large)[0] == 0xD1


@pytest.mark.parametrize(
    "data, text",
    [
        (b"\xc0", "value runs past the end at byte 1"),  # no size or count
        (b"\xd0\x00\x00\x00", "value runs past the end at byte 1"),
        (_narrow(0xC0, ITEMS, 3)[:-1], "compound value runs past the end"),
        (_wide(0xD0, ITEMS, 3)[:-2], "compound value runs past the end"),
        (b"\xc0\x00\x00", "compound value runs past the end"),  # size 0: below its count byte
        (_narrow(0xC0, ITEMS, 2), "compound value size does not match its items"),
        (_narrow(0xC1, SMALL_UINT + b"\x01", 1), "map with an odd number of items"),
        (_narrow(0xE0, SMALL_UINT + b"\x01\x02", 3)[:-1], "array runs past the end"),
        (_wide(0xF0, SMALL_UINT + b"\x01\x02", 1), "array size does not match its items"),
    ],
)
def test_short_or_inconsistent_compounds_are_refused(data: bytes, text: str) -> None:
    with pytest.raises(Amqp10Error, match=text):
        decode_value(data, 0)
