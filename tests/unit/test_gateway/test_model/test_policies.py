"""Policy matching and resolution rules (gateway.model.policies), without a server."""

from __future__ import annotations

import pytest

from sievemq.gateway.model import policies
from sievemq.gateway.model.classic.arguments import validate_declare
from sievemq.gateway.model.stream.arguments import validate_stream_declare


def _policy(
    name: str, pattern: str, definition: dict[str, object], **kw: object
) -> policies.Policy:
    body = {"pattern": pattern, "definition": definition} | kw
    return policies.parse("/", name, body)


def test_highest_priority_wins_and_apply_to_filters() -> None:
    low = _policy("a-low", "^q", {"max-length": 1})
    high = _policy("b-high", "q", {"max-length": 2}, priority=7)
    streams_only = _policy(
        "c-streams", "q", {"max-age": "1h"}, priority=9, **{"apply-to": "streams"}
    )
    exchanges = _policy("d-ex", ".*", {"alternate-exchange": "ae"}, **{"apply-to": "exchanges"})
    every = policies.ranked([low, high, streams_only, exchanges])
    assert policies.match(every, "classic", "qx") is high
    assert policies.match(every, "stream", "qx") is streams_only
    assert policies.match(every, "quorum", "xq") is high  # unanchored search, as re:run
    assert policies.match(every, "classic", "zzz") is None
    assert policies.match(every, "exchange", "x") is exchanges
    tie = _policy("a-tie", "q", {"max-length": 3}, priority=7)
    assert policies.match(policies.ranked([high, tie]), "classic", "q") is tie  # ties: by name


def test_operator_policy_merges_the_lower_value() -> None:
    policy = _policy("p", ".*", {"max-length": 10, "message-ttl": 100, "overflow": "drop-head"})
    operator = policies.parse("/", "o", {"pattern": ".*", "definition": {"max-length": 4}}, True)
    assert policies.effective_definition(policy, operator) == {
        "max-length": 4,
        "message-ttl": 100,
        "overflow": "drop-head",
    }
    assert policies.effective_definition(None, operator) == {"max-length": 4}
    assert policies.effective_definition(None, None) == {}


def test_queue_arguments_lower_value_or_the_argument() -> None:
    declared = validate_declare(
        "classic",
        "q",
        "/",
        True,
        False,
        False,
        {"x-max-length": 3, "x-overflow": "drop-head", "x-dead-letter-exchange": "dlx"},
    )
    effective = {
        "max-length": 5,
        "max-length-bytes": 100,
        "overflow": "reject-publish",
        "dead-letter-exchange": "other",
        "dead-letter-routing-key": "rk",
        "message-ttl": 50,
        "expires": 1000,
    }
    got = policies.queue_arguments(declared, effective)
    assert (got.max_length, got.max_length_bytes, got.message_ttl, got.expires) == (
        3,
        100,
        50,
        1000,
    )
    assert (got.overflow, got.dead_letter_exchange) == ("drop-head", "dlx")  # arguments win
    assert got.dead_letter_routing_key == "rk"
    assert got.table == declared.table  # what redeclares compare with stays as declared
    quorum = validate_declare("quorum", "q", "/", True, False, False, {})
    assert policies.queue_arguments(quorum, {"overflow": "reject-publish-dlx"}).overflow == (
        "reject-publish"
    )


def test_stream_limits() -> None:
    plain = validate_stream_declare("s", "/", True, False, False, {"x-queue-type": "stream"})
    argued = validate_stream_declare(
        "s",
        "/",
        True,
        False,
        False,
        {
            "x-queue-type": "stream",
            "x-max-length-bytes": 1000,
            "x-stream-max-segment-size-bytes": 2_000_000,
            "x-stream-filter-size-bytes": 32,
        },
    )
    effective = {
        "max-length-bytes": 5000,
        "max-age": "2m",
        "stream-max-segment-size-bytes": 9_000_000,
        "stream-filter-size-bytes": 128,
    }
    a = policies.stream_limits(plain, effective)
    b = policies.stream_limits(argued, effective)
    assert (a.max_bytes, a.max_age_ms, a.max_segment_bytes, a.filter_size_bytes) == (
        5000,
        120_000,
        9_000_000,
        128,
    )
    assert (b.max_bytes, b.max_age_ms, b.max_segment_bytes, b.filter_size_bytes) == (
        1000,
        120_000,
        2_000_000,
        32,  # the declared filter size stays
    )
    tiny = policies.stream_limits(plain, {"stream-max-segment-size-bytes": 0})
    assert tiny.max_segment_bytes == policies.MIN_SEGMENT_BYTES


@pytest.mark.parametrize(
    ("definition", "text"),
    [
        ({"stream-filter-size-bytes": 8}, "8 is not a valid filter size (16..4096)"),
        ({"queue-mode": "fast"}, '<<"fast">> is not a valid queue-mode value'),
        ({"ha-mode": "all"}, '[{<<"ha-mode">>,<<"all">>}] are not recognised policy settings'),
    ],
)
def test_definition_refusals(definition: dict[str, object], text: str) -> None:
    with pytest.raises(policies.PolicyError) as info:
        _policy("p", ".*", definition)
    assert info.value.reason == f"Validation failed\n\n{text}\n"


def test_keys_rabbitmq_accepts_are_accepted() -> None:
    """Keys RabbitMQ 3.10 validates are stored even where SieveMQ has nothing they change
    (docs/admin-api.md lists them), so its definitions files import."""
    definition = {
        "queue-mode": "lazy",
        "queue-version": 2,
        "max-in-memory-length": 5,
        "max-in-memory-bytes": 5,
        "queue-leader-locator": "client-local",
        "initial-cluster-size": 3,
        "alternate-exchange": "ae",
    }
    assert _policy("p", ".*", definition).definition == definition
