"""Raw property bytes: splicing x-stream-offset, reading one header, rejecting bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, encode

from sievemq.amqp import errors, hotcodec
from sievemq.amqp import properties as raw_properties

from .strategies import field_key, field_table, field_value, properties

OFFSETS = st.integers(-(2**63), 2**63 - 1)


def others(props: commands.Basic.Properties) -> dict[str, object]:
    return {k: v for k, v in props if k != "headers"}


@given(properties(), OFFSETS)
def test_splice_adds_offset_and_keeps_every_other_property(
    props: commands.Basic.Properties, offset: int
):
    spliced = raw_properties.splice_long_header(props.marshal(), "x-stream-offset", offset)
    back = raw_properties.decode_properties(spliced)
    assert back.headers == {**(props.headers or {}), "x-stream-offset": offset}
    assert others(back) == others(props)
    # the value is an AMQP long-long ('l'), whatever its size
    assert b"\x0fx-stream-offsetl" in spliced


@given(properties(headers=st.none()), OFFSETS)
def test_splice_without_headers_sets_the_flag(props: commands.Basic.Properties, offset: int):
    raw = props.marshal()
    spliced = raw_properties.splice_long_header(raw, "x-stream-offset", offset)
    assert spliced[0] & 0x20 and not raw[0] & 0x20
    assert raw_properties.decode_properties(spliced).headers == {"x-stream-offset": offset}


@given(properties(headers=field_table), field_value, OFFSETS, OFFSETS)
def test_splice_replaces_an_existing_entry(
    props: commands.Basic.Properties, other: object, first: int, second: int
):
    props.headers = {**(props.headers or {}), "x-stream-offset": other}
    once = raw_properties.splice_long_header(props.marshal(), "x-stream-offset", first)
    twice = raw_properties.splice_long_header(once, "x-stream-offset", second)
    assert len(twice) == len(once)  # replaced, not added a second time
    assert raw_properties.decode_properties(twice).headers == {
        **props.headers,
        "x-stream-offset": second,
    }


@given(properties(), st.integers(0, 2**63 - 1), st.binary(max_size=10))
def test_delivery_fast_splice_equals_general_splice(
    props: commands.Basic.Properties, offset: int, body: bytes
):
    raw = props.marshal()
    pieces = hotcodec.encode_delivery(1, "c", 1, "", "", raw, body, 4096, offset)
    assert raw_properties.splice_long_header(raw, "x-stream-offset", offset) in b"".join(pieces)


@given(properties())
def test_delivery_fields_are_what_pamqp_decodes(props: commands.Basic.Properties):
    mode, priority, expiration = raw_properties.delivery_fields(props.marshal())
    assert mode == (props.delivery_mode or 0)
    assert priority == (props.priority or 0)
    assert expiration == (None if props.expiration is None else props.expiration.encode())


@given(properties(headers=field_table.filter(bool)))
def test_read_header_returns_each_value(props: commands.Basic.Properties):
    raw = props.marshal()
    for key, value in props.headers.items():
        assert raw_properties.read_header(raw, key) == value


@given(properties(headers=field_table.filter(bool)), st.data())
def test_the_single_pass_check_finds_the_header_pamqp_decodes(
    props: commands.Basic.Properties, data: st.DataObject
):
    raw = props.marshal()
    key = data.draw(st.sampled_from(sorted(props.headers)))
    at = raw_properties.check_properties(raw, key.encode())
    assert at > 0
    assert raw_properties.header_at(raw, at) == props.headers[key]
    assert raw_properties.check_properties(raw) == -1  # no key asked: nothing found


@given(properties(), field_key)
def test_the_single_pass_check_reports_an_absent_header(props: commands.Basic.Properties, key: str):
    if props.headers and key in props.headers:
        return
    assert raw_properties.check_properties(props.marshal(), key.encode()) == -1


def test_the_single_pass_check_finds_only_top_level_headers():
    nested = commands.Basic.Properties(content_type="k", headers={"a": {"k": 1}, "b": ["k"]})
    assert raw_properties.check_properties(nested.marshal(), b"k") == -1
    first = b"\x01k" + b"S\x00\x00\x00\x01x" + b"\x01k" + b"S\x00\x00\x00\x01y"
    raw = b"\x20\x00" + len(first).to_bytes(4, "big") + first
    at = raw_properties.check_properties(raw, b"k")
    assert raw_properties.header_at(raw, at) == "x"  # the first of two entries, as read_header
    assert raw_properties.read_header(raw, "k") == "x"


@given(properties(), field_key)
def test_read_header_of_absent_name_is_none(props: commands.Basic.Properties, key: str):
    if props.headers and key in props.headers:
        return
    assert raw_properties.read_header(props.marshal(), key) is None


def test_read_header_ignores_the_name_in_other_properties():
    props = commands.Basic.Properties(content_type="x-filter", headers={"a": 1})
    assert raw_properties.read_header(props.marshal(), "x-filter") is None
    props = commands.Basic.Properties(content_type="x-filter", app_id="x-filter")
    assert raw_properties.read_header(props.marshal(), "x-filter") is None


def test_read_header_reads_a_filter_value_array():
    values = ["eu", "us", "ünïcode"]
    props = commands.Basic.Properties(headers={"x-stream-filter-value": values, "z": "q"})
    assert raw_properties.read_header(props.marshal(), "x-stream-filter-value") == values


@given(properties())
def test_well_formed_properties_pass_the_check(props: commands.Basic.Properties):
    raw_properties.check_properties(props.marshal())


@given(properties(headers=field_table.filter(bool)), st.data())
def test_truncated_properties_are_frame_errors(props: commands.Basic.Properties, data):
    raw = props.marshal()
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(errors.FrameError):
        hotcodec.decode_content_header(b"\x00\x3c\x00\x00" + bytes(8) + raw[:cut])


@given(st.binary(max_size=64))
def test_arbitrary_property_bytes_raise_only_frame_errors(raw: bytes):
    try:
        raw_properties.check_properties(raw)
    except errors.FrameError:
        return
    # what the check accepts, pamqp can decode and we can splice
    raw_properties.decode_properties(raw)
    raw_properties.splice_long_header(raw, "x-stream-offset", 1)


def test_unknown_field_type_is_rejected():
    table = b"\x01a" + b"Z" + b"\x00"
    raw = b"\x20\x00" + len(table).to_bytes(4, "big") + table
    with pytest.raises(errors.FrameError) as info:
        raw_properties.check_properties(raw)
    assert info.value.reply_code == 501


def test_table_longer_than_properties_is_rejected():
    raw = b"\x20\x00" + encode.field_table({"a": 1})[:-1]
    with pytest.raises(errors.FrameError):
        hotcodec.decode_content_header(b"\x00\x3c\x00\x00" + bytes(8) + raw)


@given(properties(), st.text(max_size=60).map(str.encode))
def test_reply_to_read_and_replaced_like_pamqp(props: commands.Basic.Properties, value: bytes):
    raw = props.marshal()
    expected = props.reply_to.encode() if props.reply_to is not None else None
    assert raw_properties.reply_to(raw) == expected
    if props.reply_to is None:
        with pytest.raises(ValueError):
            raw_properties.replace_reply_to(raw, value)
        return
    replaced = raw_properties.replace_reply_to(raw, value)
    assert raw_properties.reply_to(replaced) == value
    back = raw_properties.decode_properties(replaced)
    assert {k: v for k, v in back if k != "reply_to"} == {k: v for k, v in props if k != "reply_to"}


def test_reply_to_of_truncated_properties_is_a_frame_error():
    raw = commands.Basic.Properties(reply_to="amq.rabbitmq.reply-to").marshal()
    with pytest.raises(errors.FrameError):
        raw_properties.reply_to(raw[:-3])


@pytest.mark.parametrize(
    ("raw", "name"),
    [(b"\x00\x04\x01\x80", "cluster_id"), (b"\x80\x00\x02a\xff", "content_type")],
)
def test_shortstr_property_that_is_not_utf8_is_accepted_and_decoded(raw: bytes, name: str):
    """AMQP 0-9-1 shortstrs are octets (RabbitMQ does not check them): the check accepts
    them, the bytes are spliced as sent, and the cold-path decode shows U+FFFD for them."""
    raw_properties.check_properties(raw)
    props = raw_properties.decode_properties(raw)
    assert "\ufffd" in getattr(props, name)
    spliced = raw_properties.splice_long_header(raw, "x-stream-offset", 1)
    assert raw_properties.decode_properties(spliced).headers == {"x-stream-offset": 1}
