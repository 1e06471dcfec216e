"""queue.declare validation of stream queues: RabbitMQ's checks, order and texts."""

from __future__ import annotations

from typing import Any

import pytest

from sievemq.amqp.errors import PreconditionFailed, ResourceLocked
from sievemq.gateway.model.stream.arguments import (
    StreamArguments,
    assert_equivalence,
    assert_exclusive_access,
    assert_field_equivalence,
    duration_ms,
    validate_stream_declare,
)

Q = "queue 'q' in vhost '/'"


def declare(
    args: dict[str, Any] | None = None,
    name: str = "q",
    durable: bool = True,
    exclusive: bool = False,
    auto_delete: bool = False,
) -> StreamArguments:
    return validate_stream_declare(name, "/", durable, exclusive, auto_delete, args)


def reply(args: dict[str, Any] | None = None, **flags: Any) -> str:
    with pytest.raises(PreconditionFailed) as info:
        declare(args, **flags)
    assert info.value.reply_code == 406
    return info.value.reply_text


def test_defaults() -> None:
    a = declare({"x-queue-type": "stream"})
    assert a.max_segment_size_bytes == 500_000_000
    assert a.filter_size_bytes == 16
    assert a.compression == "none"
    assert a.max_length_bytes is None and a.max_age_ms is None
    assert a.leader_locator == "client-local"
    assert a.table == {"x-queue-type": "stream"}


def test_no_queue_type_means_stream() -> None:
    assert declare(None).table == {"x-queue-type": "stream"}


def test_all_arguments_parsed() -> None:
    a = declare(
        {
            "x-queue-type": "stream",
            "x-max-length-bytes": 20_000_000_000,
            "x-max-age": "7D",
            "x-stream-max-segment-size-bytes": 1_000_000,
            "x-stream-filter-size-bytes": 1024,
            "x-initial-cluster-size": 3,
            "x-queue-leader-locator": "least-leaders",
            "x-stream-compression": "zstd",
            "x-custom": {"ignored": 1},
        }
    )
    assert a.max_length_bytes == 20_000_000_000
    assert a.max_age_ms == 7 * 86_400_000
    assert a.max_segment_size_bytes == 1_000_000
    assert a.filter_size_bytes == 1024
    assert a.initial_cluster_size == 3
    assert a.leader_locator == "balanced"
    assert a.compression == "zstd"
    assert "x-custom" not in a.table
    assert a.table["x-queue-leader-locator"] == "least-leaders"


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1Y", 365 * 86_400_000),
        ("2M", 60 * 86_400_000),
        ("7D", 7 * 86_400_000),
        ("12h", 12 * 3_600_000),
        ("30m", 1_800_000),
        ("45s", 45_000),
        ("0s", 0),
    ],
)
def test_duration_units(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "D", "7", "7d", "7 D", "1h30m", "10ms", "-1D", "1.5h"])
def test_duration_rejects(text: str) -> None:
    assert duration_ms(text) is None


@pytest.mark.parametrize("bad", ["7d", "0D", "1h30m", "10ms", ""])
def test_max_age_invalid(bad: str) -> None:
    assert reply({"x-max-age": bad}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-max-age' for {Q}: invalid_max_age"
    )


def test_max_age_must_be_longstr() -> None:
    assert reply({"x-max-age": 3600}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-max-age' for {Q}: {{unacceptable_type,long}}"
    )


@pytest.mark.parametrize(
    "key",
    ["x-max-length-bytes", "x-stream-max-segment-size-bytes", "x-stream-filter-size-bytes"],
)
def test_integer_arguments_type_and_sign(key: str) -> None:
    assert reply({key: "10"}) == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for {Q}: {{unacceptable_type,longstr}}"
    )
    assert reply({key: True}) == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for {Q}: {{unacceptable_type,bool}}"
    )
    assert reply({key: 1.5}) == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for {Q}: {{unacceptable_type,double}}"
    )
    assert reply({key: -1}) == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for {Q}: {{value_negative,-1}}"
    )


def test_initial_cluster_size_zero() -> None:
    assert reply({"x-initial-cluster-size": 0}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-initial-cluster-size' for {Q}: {{value_zero,0}}"
    )


def test_leader_locator() -> None:
    assert reply({"x-queue-leader-locator": "nearest"}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-queue-leader-locator' for {Q}: "
        "'nearest' is not a leader locator; use 'client-local' or 'balanced' (RabbitMQ's "
        "older 'random', 'least-leaders' and 'min-masters' mean 'balanced')"
    )
    assert declare({"x-queue-leader-locator": "client-local"}).leader_locator == "client-local"
    assert declare({"x-queue-leader-locator": "least-leaders"}).leader_locator == "balanced"


def test_compression() -> None:
    assert reply({"x-stream-compression": "gzip"}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-compression' for {Q}: "
        "\"unsupported compression 'gzip'; use 'none' or 'zstd'\""
    )
    assert reply({"x-stream-compression": 1}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-compression' for {Q}: "
        "{unacceptable_type,long}"
    )


def test_unknown_queue_type() -> None:
    assert reply({"x-queue-type": "fancy"}) == (
        f"PRECONDITION_FAILED - invalid arg 'x-queue-type' for {Q}: "
        "\"unsupported queue type 'fancy'\""
    )


@pytest.mark.parametrize("qtype", ["classic", "quorum"])
def test_other_known_queue_types_not_supported(qtype: str) -> None:
    assert reply({"x-queue-type": qtype, "x-message-ttl": 5}) == (
        f"PRECONDITION_FAILED - queue type '{qtype}' is not supported by this gateway; "
        "declare x-queue-type=stream"
    )


def test_stream_type_aliases() -> None:
    assert declare({"x-queue-type": "rabbit_stream_queue"}).filter_size_bytes == 16
    assert declare({"x-queue-type": b"stream"}).table["x-queue-type"] == "stream"


@pytest.mark.parametrize(
    "key",
    [
        "x-message-ttl",
        "x-expires",
        "x-max-length",
        "x-max-priority",
        "x-overflow",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-single-active-consumer",
        "x-queue-mode",
        "x-delivery-limit",
        "x-quorum-initial-group-size",
    ],
)
def test_arguments_of_other_queue_types(key: str) -> None:
    assert reply({key: 1}) == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for {Q} of queue type rabbit_stream_queue"
    )


def test_flags() -> None:
    assert reply(name="") == (
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_stream_queue"
    )
    assert reply(auto_delete=True) == (
        f"PRECONDITION_FAILED - invalid property 'auto-delete' for {Q}"
    )
    assert reply(exclusive=True) == (
        f"PRECONDITION_FAILED - invalid property 'exclusive-owner' for {Q}"
    )
    assert reply(durable=False) == f"PRECONDITION_FAILED - invalid property 'non-durable' for {Q}"


def test_sizes() -> None:
    assert reply({"x-stream-max-segment-size-bytes": 3_000_000_001}) == (
        "PRECONDITION_FAILED - Exceeded max value for x-stream-max-segment-size-bytes"
    )
    assert declare({"x-stream-max-segment-size-bytes": 3_000_000_000}).max_segment_size_bytes
    for bad in (0, 15, 4097):
        assert reply({"x-stream-filter-size-bytes": bad}) == (
            "PRECONDITION_FAILED - Invalid value for x-stream-filter-size-bytes"
        )
    assert declare({"x-stream-filter-size-bytes": 16}).filter_size_bytes == 16
    assert declare({"x-stream-filter-size-bytes": 4096}).filter_size_bytes == 4096


def test_order_type_then_values_then_rejected_then_name_then_flags() -> None:
    # queue type beats everything
    assert "queue type 'classic'" in reply({"x-queue-type": "classic", "x-max-age": "x"})
    # a bad value beats a rejected argument, whatever the table order
    assert "x-max-age" in reply({"x-message-ttl": 1, "x-max-age": "x"})
    # values are checked in RabbitMQ's validator order, not table order
    assert "x-max-length-bytes" in reply({"x-max-age": "x", "x-max-length-bytes": "x"})
    # a rejected argument beats server-named
    assert "x-expires" in reply({"x-expires": 1}, name="")
    # server-named beats the flags
    assert "server-named" in reply(name="", exclusive=True)
    # auto-delete, then exclusive, then durable
    assert "auto-delete" in reply(auto_delete=True, exclusive=True, durable=False)
    assert "exclusive-owner" in reply(exclusive=True, durable=False)
    # flags beat the size checks
    assert "non-durable" in reply({"x-stream-filter-size-bytes": 5}, durable=False)


def test_exclusive_with_durable_still_names_exclusive() -> None:
    assert "exclusive-owner" in reply(exclusive=True, durable=True)


# ------------------------------------------------------------------ redeclare equivalence


def test_equivalent_redeclare() -> None:
    current = declare({"x-max-age": "7D", "x-max-length-bytes": 100}).table
    assert_equivalence(current, {"x-max-age": "7D", "x-max-length-bytes": 100}, "q", "/")
    assert_equivalence(
        current,
        {"x-queue-type": "stream", "x-max-age": b"7D", "x-max-length-bytes": 100, "x-foo": 1},
        "q",
        "/",
    )


def test_inequivalent_value() -> None:
    current = declare({"x-max-age": "7D"}).table
    with pytest.raises(PreconditionFailed) as info:
        assert_equivalence(current, {"x-max-age": "1D"}, "q", "/")
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-age' for {Q}: "
        "received the value '1D' of type 'longstr' but current is the value '7D' of type 'longstr'"
    )


def test_inequivalent_missing_and_added() -> None:
    current = declare({"x-max-length-bytes": 100}).table
    with pytest.raises(PreconditionFailed) as info:
        assert_equivalence(current, {}, "q", "/")
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length-bytes' for {Q}: "
        "received none but current is the value '100' of type 'long'"
    )
    with pytest.raises(PreconditionFailed) as info:
        assert_equivalence(declare().table, {"x-stream-filter-size-bytes": 32}, "q", "/")
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-stream-filter-size-bytes' for {Q}: "
        "received the value '32' of type 'long' but current is none"
    )


def test_inequivalent_queue_type() -> None:
    with pytest.raises(PreconditionFailed) as info:
        assert_equivalence(declare().table, {"x-queue-type": "classic"}, "q", "/")
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for {Q}: "
        "received the value 'classic' of type 'longstr' but current is the value 'stream' "
        "of type 'longstr'"
    )


def test_inequivalent_type_class() -> None:
    current = declare({"x-max-length-bytes": 1}).table
    with pytest.raises(PreconditionFailed) as info:
        assert_equivalence(current, {"x-max-length-bytes": True}, "q", "/")
    assert "received the value 'true' of type 'bool'" in info.value.reply_text


def test_field_equivalence_and_exclusive_access() -> None:
    with pytest.raises(PreconditionFailed) as info:
        assert_field_equivalence("durable", True, False, "q", "/")
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for {Q}: "
        "received 'false' but current is 'true'"
    )
    assert_field_equivalence("auto_delete", False, False, "q", "/")
    with pytest.raises(ResourceLocked) as locked:
        assert_exclusive_access(False, True, "q", "/")
    assert locked.value.reply_code == 405
    assert locked.value.reply_text.startswith(
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked {Q}. It could be "
        "originally declared on another connection"
    )
