"""x-stream-offset, consumer arguments and x-stream-filter-value parsing."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from sievemq.amqp.errors import NotImplemented_, PreconditionFailed
from sievemq.gateway.model.stream.arguments import (
    OffsetSpec,
    auto_ack_not_supported,
    get_not_supported,
    global_qos_not_supported,
    parse_consumer_arguments,
    parse_filter_values,
    parse_offset_spec,
    prefetch_not_set,
    purge_not_supported,
)

Q = "queue 'q' in vhost '/'"
NOW = 1_700_000_000_000


def consume_reply(args: dict[str, Any]) -> str:
    with pytest.raises(PreconditionFailed) as info:
        parse_consumer_arguments(args, "q", "/", now_ms=NOW)
    return info.value.reply_text


@pytest.mark.parametrize("word", ["first", "last", "next"])
def test_offset_words(word: str) -> None:
    assert parse_offset_spec(word) == OffsetSpec(word)  # type: ignore[arg-type]
    assert parse_offset_spec(word.encode()) == OffsetSpec(word)  # type: ignore[arg-type]


def test_offset_integers() -> None:
    assert parse_offset_spec(0) == OffsetSpec("offset", 0)
    assert parse_offset_spec(123456789012) == OffsetSpec("offset", 123456789012)
    assert parse_offset_spec(-5) == OffsetSpec("first")


def test_offset_timestamp_is_seconds() -> None:
    ts = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert parse_offset_spec(ts) == OffsetSpec("timestamp", int(ts.timestamp()) * 1000)
    naive = datetime.datetime(2024, 1, 2, 3, 4, 5)
    assert parse_offset_spec(naive) == OffsetSpec("timestamp", int(ts.timestamp()) * 1000)


@pytest.mark.parametrize(("text", "ms"), [("30m", 1_800_000), ("7D", 7 * 86_400_000), ("0s", 0)])
def test_offset_interval(text: str, ms: int) -> None:
    assert parse_offset_spec(text, now_ms=NOW) == OffsetSpec("timestamp", NOW - ms)


def test_offset_interval_uses_clock() -> None:
    spec = parse_offset_spec("1h")
    now = datetime.datetime.now(datetime.UTC).timestamp() * 1000
    assert spec.kind == "timestamp"
    assert abs(spec.value - (now - 3_600_000)) < 5_000


@pytest.mark.parametrize(
    ("value", "term"),
    [
        ("foo", '{longstr,<<"foo">>}'),
        ("1 h", '{longstr,<<"1 h">>}'),
        (True, "{bool,true}"),
        (1.5, "{double,1.5}"),
        ({"a": 1}, '{table,[{<<"a">>,long,1}]}'),
        (["first"], '{array,[{longstr,<<"first">>}]}'),
    ],
)
def test_offset_invalid(value: Any, term: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        parse_offset_spec(value, queue="q", vhost="/")
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-offset' for {Q}: "
        f"{{invalid_stream_offset_arg,{term}}}"
    )


def test_consumer_defaults() -> None:
    opts = parse_consumer_arguments(None, "q", "/")
    assert opts.offset == OffsetSpec("next")
    assert not opts.offset_given
    assert opts.values == () and not opts.match_unfiltered and not opts.match_all
    assert opts.consumer_name is None and opts.sql is None


def test_consumer_all_arguments() -> None:
    opts = parse_consumer_arguments(
        {
            "x-stream-offset": 10,
            "x-stream-filter": ["emea", "apac", "emea"],
            "x-stream-match-unfiltered": True,
            "x-filter-match-type": "all",
            "x-stream-consumer-name": "billing",
            "x-stream-filter-sql": "amount > 10",
            "x-credit": 5,
        },
        "q",
        "/",
    )
    assert opts.offset == OffsetSpec("offset", 10) and opts.offset_given
    assert opts.values == ("emea", "apac")
    assert opts.match_unfiltered and opts.match_all
    assert opts.consumer_name == "billing"
    assert opts.sql == "amount > 10"


def test_consumer_single_filter_string() -> None:
    opts = parse_consumer_arguments({"x-stream-filter": "emea"}, "q", "/")
    assert opts.values == ("emea",)
    assert opts.has_value_filter


def test_match_unfiltered_ignored_without_filter() -> None:
    opts = parse_consumer_arguments({"x-stream-match-unfiltered": True}, "q", "/")
    assert not opts.match_unfiltered


def test_x_priority_rejected_after_offset() -> None:
    assert consume_reply({"x-priority": 5}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-priority' for {Q} of queue type rabbit_stream_queue"
    )
    assert "x-stream-offset" in consume_reply({"x-priority": 5, "x-stream-offset": "bad"})


def test_filter_errors() -> None:
    assert consume_reply({"x-stream-filter": []}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-filter' for {Q}: "
        '"empty array of filter values"'
    )
    assert consume_reply({"x-stream-filter": 5}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-filter' for {Q}: {{unacceptable_type,long}}"
    )
    assert consume_reply({"x-stream-filter": ["a", 5]}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-filter' for {Q}: "
        '"element 1: expected longstr, got long"'
    )
    assert consume_reply({"x-stream-filter": ""}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-filter' for {Q}: \"empty value\""
    )
    assert consume_reply({"x-stream-filter": [str(i) for i in range(65)]}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-filter' for {Q}: "
        '"65 filter values, at most 64 are allowed"'
    )


def test_match_type_and_unfiltered_errors() -> None:
    assert consume_reply({"x-filter-match-type": "some"}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-filter-match-type' for {Q}: "
        "\"unknown match type 'some'; use 'any' or 'all'\""
    )
    assert consume_reply({"x-filter-match-type": 1}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-filter-match-type' for {Q}: "
        "{unacceptable_type,long}"
    )
    assert consume_reply({"x-stream-filter": "a", "x-stream-match-unfiltered": "true"}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-match-unfiltered' for {Q}: "
        "{unacceptable_type,longstr}"
    )


def test_consumer_name_and_sql_errors() -> None:
    assert consume_reply({"x-stream-consumer-name": ""}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-consumer-name' for {Q}: "
        '"consumer name must be 1..255 bytes of UTF-8 without NUL"'
    )
    assert "x-stream-consumer-name" in consume_reply({"x-stream-consumer-name": "x" * 256})
    assert consume_reply({"x-stream-consumer-name": 7}).endswith("{unacceptable_type,long}")
    assert consume_reply({"x-stream-filter-sql": b"\xff"}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-filter-sql' for {Q}: "
        "{unacceptable_type,longstr}"
    )


# ----------------------------------------------------------------- x-stream-filter-value


def test_filter_value_absent_or_empty() -> None:
    assert parse_filter_values(None) == ()
    assert parse_filter_values("") == ()
    assert parse_filter_values(b"") == ()
    assert parse_filter_values([]) == ()


def test_filter_value_single_and_many() -> None:
    assert parse_filter_values("emea") == ("emea",)
    assert parse_filter_values("a,b") == ("a,b",)
    assert parse_filter_values("zürich") == ("zürich",)
    assert parse_filter_values(["a", "b", "a", b"c"]) == ("a", "b", "c")
    assert parse_filter_values("x" * 4096) == ("x" * 4096,)
    assert len(parse_filter_values([str(i) for i in range(64)])) == 64


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (5, "expected longstr or array of longstr, got long"),
        (True, "expected longstr or array of longstr, got bool"),
        ({"a": "b"}, "expected longstr or array of longstr, got table"),
        (b"\xff\xfe", "not valid UTF-8"),
        ("a\x00b", "contains NUL"),
        ("x" * 4097, "4097 bytes, at most 4096 are allowed"),
        ("é" * 2049, "4098 bytes, at most 4096 are allowed"),
        (["a", ""], "element 1: empty value"),
        (["a", 1], "element 1: expected longstr, got long"),
        ([b"\xff"], "element 0: not valid UTF-8"),
        ([str(i) for i in range(65)], "65 values, at most 64"),
    ],
)
def test_filter_value_invalid(value: Any, why: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        parse_filter_values(value)
    assert info.value.reply_text == f"PRECONDITION_FAILED - invalid x-stream-filter-value: {why}"


def test_stream_operation_errors() -> None:
    cases = [
        (purge_not_supported, "NOT_IMPLEMENTED - queue.purge not supported by stream queues "),
        (get_not_supported, "NOT_IMPLEMENTED - basic.get not supported by stream queues "),
    ]
    for make, prefix in cases:
        err = make("q", "/")
        assert isinstance(err, NotImplemented_) and err.closes_connection
        assert err.reply_text == prefix + Q
    assert auto_ack_not_supported("q", "/").reply_text == (
        f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream {Q}"
    )
    assert global_qos_not_supported("q", "/").reply_text == (
        f"NOT_IMPLEMENTED - {Q} does not support global qos"
    )
    assert prefetch_not_set("q", "/").reply_text == (
        f"PRECONDITION_FAILED - consumer prefetch count is not set for stream {Q}"
    )
