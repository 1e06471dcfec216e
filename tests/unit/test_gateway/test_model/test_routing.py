"""AMQP 0-9-1 routing semantics of the four exchange types and exchange-to-exchange routes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sievemq.amqp.errors import AccessRefused, NotFound, PreconditionFailed
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.routing import Binding, HeadersMatcher, TopicMatcher, split_topic
from sievemq.gateway.model.vhost import VirtualHost


def topic_matches(pattern: str, key: str) -> bool:
    m = TopicMatcher()
    m.add(Binding.make("x", "queue", "q", pattern, None))
    return ("queue", "q") in set(m.match(key, dict))


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("a.b.c", "a.b.c", True),
        ("a.b.c", "a.b", False),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.c", False),
        ("a.*.c", "a..c", True),  # an empty word is a word
        ("a.*.c", "a.b.b.c", False),
        ("*", "", False),
        ("*", "a", True),
        ("*", "a.b", False),
        ("#", "", True),  # zero words
        ("#", "a.b.c", True),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("a.#", "b.a", False),
        ("#.a", "a", True),
        ("#.a", "x.y.a", True),
        ("#.a", "a.x", False),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.b.d.c", True),
        ("a.#.c", "a.b.d", False),
        ("#.#", "", True),
        ("#.*", "", False),
        ("#.*", "a", True),
        ("*.#", "a.b", True),
        ("", "", True),
        ("", "a", False),
        ("a.", "a.", True),
        ("a.", "a", False),
        ("a.*", "a.", True),
        ("#.b.#", "a.b.c", True),
        ("#.b.#", "b", True),
        ("#.b.#", "a.c", False),
        ("A.b", "a.b", False),
    ],
)
def test_topic(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected


def test_split_topic() -> None:
    assert split_topic("") == []
    assert split_topic("a.") == ["a", ""]
    assert split_topic(".") == ["", ""]


def test_topic_many_hashes_stay_fast() -> None:
    m = TopicMatcher()
    m.add(Binding.make("x", "queue", "q", "#.#.#.#.#.#.#.#.z", None))
    key = ".".join(["w"] * 200)
    assert set(m.match(key, dict)) == set()
    assert set(m.match(key + ".z", dict)) == {("queue", "q")}


def test_topic_unbind_prunes_and_invalidates_cache() -> None:
    m = TopicMatcher()
    b1 = Binding.make("x", "queue", "q1", "a.*", None)
    b2 = Binding.make("x", "queue", "q2", "a.#", None)
    m.add(b1)
    m.add(b2)
    assert set(m.match("a.b", dict)) == {("queue", "q1"), ("queue", "q2")}
    m.remove(b1)
    assert set(m.match("a.b", dict)) == {("queue", "q2")}
    m.remove(b2)
    assert set(m.match("a.b", dict)) == set()
    m.add(b1)
    assert set(m.match("a.b", dict)) == {("queue", "q1")}


def headers_match(binding_args: dict[str, Any], headers: dict[str, Any] | None) -> bool:
    m = HeadersMatcher()
    m.add(Binding.make("x", "queue", "q", "", binding_args))
    return bool(set(m.match("", lambda: headers)))


def test_headers_all_default() -> None:
    args = {"a": 1, "b": "x"}
    assert headers_match(args, {"a": 1, "b": "x", "c": 3})
    assert not headers_match(args, {"a": 1})
    assert not headers_match(args, {"a": 1, "b": "y"})
    assert not headers_match(args, None)


def test_headers_any() -> None:
    args = {"x-match": "any", "a": 1, "b": "x"}
    assert headers_match(args, {"b": "x"})
    assert not headers_match(args, {"a": 2, "b": "y"})
    assert not headers_match({"x-match": "any"}, {"a": 1})


def test_headers_types_must_agree() -> None:
    assert not headers_match({"a": 1}, {"a": True})
    assert not headers_match({"a": 1}, {"a": "1"})


def test_headers_void_matches_presence() -> None:
    assert headers_match({"a": None}, {"a": "anything"})
    assert not headers_match({"a": None}, {"b": 1})


def test_headers_x_keys() -> None:
    assert headers_match({"x-match": "all", "x-k": "v"}, {})  # x- keys ignored
    assert not headers_match({"x-match": "all-with-x", "x-k": "v"}, {})
    assert headers_match({"x-match": "all-with-x", "x-k": "v"}, {"x-k": "v"})
    assert headers_match({"x-match": "any-with-x", "x-k": "v", "a": 1}, {"x-k": "v"})
    assert not headers_match({"x-match": "any", "x-k": "v"}, {"x-k": "v"})


# ------------------------------------------------------------------ through a vhost


@pytest.fixture
def vh(tmp_path: Path) -> VirtualHost:
    broker = Broker(tmp_path)
    vhost = broker.vhost("/")
    for name in ("q1", "q2", "q3"):
        vhost.declare_queue(name)
    return vhost


def names(queues: list[Any]) -> set[str]:
    return {q.name for q in queues}


def no_headers() -> dict[str, Any]:
    raise AssertionError("headers decoded for a non-headers route")


def test_default_exchange(vh: VirtualHost) -> None:
    assert names(vh.route("", "q1", no_headers)) == {"q1"}
    assert vh.route("", "nope", no_headers) == []


def test_predeclared_exchanges(vh: VirtualHost) -> None:
    for name, kind in [
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ]:
        assert vh.get_exchange(name).type == kind
    vh.bind("queue", "q1", "amq.direct", "k")
    vh.bind("queue", "q2", "amq.fanout")
    vh.bind("queue", "q3", "amq.topic", "a.#")
    assert names(vh.route("amq.direct", "k", no_headers)) == {"q1"}
    assert names(vh.route("amq.fanout", "whatever", no_headers)) == {"q2"}
    assert names(vh.route("amq.topic", "a.b", no_headers)) == {"q3"}


def test_unknown_exchange_on_publish(vh: VirtualHost) -> None:
    with pytest.raises(NotFound) as info:
        vh.route("missing", "k", no_headers)
    assert info.value.reply_text == "NOT_FOUND - no exchange 'missing' in vhost '/'"


def test_internal_exchange_refuses_publish(vh: VirtualHost) -> None:
    vh.declare_exchange("inner", "fanout", internal=True)
    with pytest.raises(AccessRefused) as info:
        vh.route("inner", "", no_headers)
    assert info.value.reply_text == (
        "ACCESS_REFUSED - cannot publish to internal exchange 'inner' in vhost '/'"
    )


def test_headers_fn_called_once_and_lazily(vh: VirtualHost) -> None:
    calls = []

    def headers() -> dict[str, Any]:
        calls.append(1)
        return {"k": "v"}

    vh.declare_exchange("h1", "headers")
    vh.declare_exchange("h2", "headers")
    vh.bind("queue", "q1", "h1", "", {"k": "v"})
    vh.bind("exchange", "h2", "h1", "", {"k": "v"})
    vh.bind("queue", "q2", "h2", "", {"x-match": "any", "k": "v"})
    assert names(vh.route("h1", "", headers)) == {"q1", "q2"}
    assert len(calls) == 1


def test_exchange_to_exchange_and_dedup(vh: VirtualHost) -> None:
    vh.declare_exchange("a", "topic")
    vh.declare_exchange("b", "fanout")
    vh.bind("exchange", "b", "a", "orders.#")
    vh.bind("queue", "q1", "b")
    vh.bind("queue", "q1", "a", "orders.*")  # q1 reached twice: one copy
    vh.bind("queue", "q2", "a", "other")
    result = vh.route("a", "orders.new", no_headers)
    assert [q.name for q in result] == ["q1"]
    assert names(vh.route("a", "other", no_headers)) == {"q2"}


def test_exchange_cycles_terminate(vh: VirtualHost) -> None:
    vh.declare_exchange("a", "fanout")
    vh.declare_exchange("b", "fanout")
    vh.bind("exchange", "b", "a")
    vh.bind("exchange", "a", "b")
    vh.bind("exchange", "a", "a")
    vh.bind("queue", "q3", "b")
    assert names(vh.route("a", "", no_headers)) == {"q3"}
    assert names(vh.route("b", "", no_headers)) == {"q3"}


def test_alternate_exchange(vh: VirtualHost) -> None:
    vh.declare_exchange("ae", "fanout")
    vh.bind("queue", "q3", "ae")
    vh.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae"})
    vh.bind("queue", "q1", "main", "k")
    assert names(vh.route("main", "k", no_headers)) == {"q1"}
    assert names(vh.route("main", "unroutable", no_headers)) == {"q3"}


def test_headers_binding_validation(vh: VirtualHost) -> None:
    with pytest.raises(PreconditionFailed) as info:
        vh.bind("queue", "q1", "amq.headers", "", {"x-match": "some"})
    assert info.value.reply_text == (
        'PRECONDITION_FAILED - Invalid x-match field value <<"some">>; '
        "expected all, any, all-with-x, or any-with-x"
    )
    with pytest.raises(PreconditionFailed) as info:
        vh.bind("queue", "q1", "amq.headers", "", {"x-match": 1})
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - Invalid x-match field type long (value 1); expected longstr"
    )
    vh.bind("queue", "q1", "amq.direct", "", {"x-match": "some"})  # only headers validates


def test_unbind_stops_routing(vh: VirtualHost) -> None:
    vh.bind("queue", "q1", "amq.direct", "k", {"a": 1})
    vh.bind("queue", "q1", "amq.direct", "k", {"a": 2})
    vh.unbind("queue", "q1", "amq.direct", "k", {"a": 1})
    assert names(vh.route("amq.direct", "k", no_headers)) == {"q1"}  # other args remain
    vh.unbind("queue", "q1", "amq.direct", "k", {"a": 2})
    assert vh.route("amq.direct", "k", no_headers) == []
    vh.unbind("queue", "q1", "amq.direct", "k", {"a": 2})  # idempotent
