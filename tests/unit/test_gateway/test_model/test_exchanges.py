"""exchange.declare / delete and bind / unbind rules and reply texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.amqp.errors import AccessRefused, NotFound, PreconditionFailed
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.vhost import VirtualHost


@pytest.fixture
def vh(tmp_path: Path) -> VirtualHost:
    vhost = Broker(tmp_path).vhost("/")
    vhost.declare_queue("q")
    return vhost


def test_declare_and_redeclare(vh: VirtualHost) -> None:
    x = vh.declare_exchange("logs", "topic", durable=True)
    assert vh.declare_exchange("logs", "topic", durable=True) is x
    assert vh.declare_exchange("logs", "", passive=True) is x


def test_unknown_type_is_a_406_channel_error(vh: VirtualHost) -> None:
    with pytest.raises(PreconditionFailed) as info:
        vh.declare_exchange("x", "x-delayed")
    assert info.value.reply_code == 406 and not info.value.closes_connection
    assert info.value.reply_text == "PRECONDITION_FAILED - unknown exchange type 'x-delayed'"


def test_inequivalent_exchange(vh: VirtualHost) -> None:
    vh.declare_exchange("logs", "direct")
    with pytest.raises(PreconditionFailed) as info:
        vh.declare_exchange("logs", "fanout")
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'logs' in vhost '/': "
        "received 'fanout' but current is 'direct'"
    )
    with pytest.raises(PreconditionFailed) as info:
        vh.declare_exchange("logs", "direct", durable=False)
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'logs' in vhost '/': "
        "received 'false' but current is 'true'"
    )
    with pytest.raises(PreconditionFailed) as info:
        vh.declare_exchange("logs", "direct", arguments={"alternate-exchange": "ae"})
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'logs' in "
        "vhost '/': received the value 'ae' of type 'longstr' but current is none"
    )
    vh.declare_exchange("logs", "direct", arguments={"other": 1})  # other args not compared


def test_passive_missing(vh: VirtualHost) -> None:
    with pytest.raises(NotFound) as info:
        vh.declare_exchange("nope", "direct", passive=True)
    assert info.value.reply_text == "NOT_FOUND - no exchange 'nope' in vhost '/'"


def test_reserved_names(vh: VirtualHost) -> None:
    with pytest.raises(AccessRefused) as info:
        vh.declare_exchange("amq.custom", "direct")
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        "ACCESS_REFUSED - exchange name 'amq.custom' contains reserved prefix 'amq.*'"
    )
    # an existing amq.* exchange may be redeclared with its own properties
    assert vh.declare_exchange("amq.direct", "direct").name == "amq.direct"
    with pytest.raises(NotFound):
        vh.declare_exchange("amq.custom", "direct", passive=True)


def test_default_exchange_is_untouchable(vh: VirtualHost) -> None:
    text = "ACCESS_REFUSED - operation not permitted on the default exchange"
    for action in (
        lambda: vh.declare_exchange("", "direct"),
        lambda: vh.declare_exchange("", "direct", passive=True),
        lambda: vh.delete_exchange(""),
        lambda: vh.bind("queue", "q", "", "q"),
        lambda: vh.bind("exchange", "", "amq.direct"),
    ):
        with pytest.raises(AccessRefused) as info:
            action()
        assert info.value.reply_text == text


def test_delete_system_exchange(vh: VirtualHost) -> None:
    with pytest.raises(AccessRefused) as info:
        vh.delete_exchange("amq.topic")
    assert info.value.reply_text == (
        "ACCESS_REFUSED - deletion of system exchange 'amq.topic' in vhost '/' not allowed"
    )


def test_delete_if_unused(vh: VirtualHost) -> None:
    vh.declare_exchange("x", "direct")
    vh.bind("queue", "q", "x", "k")
    with pytest.raises(PreconditionFailed) as info:
        vh.delete_exchange("x", if_unused=True)
    assert info.value.reply_text == "PRECONDITION_FAILED - exchange 'x' in vhost '/' in use"
    vh.delete_exchange("x")
    assert "x" not in vh.exchanges
    assert list(vh.bindings()) == []
    vh.delete_exchange("x")  # idempotent


def test_destination_binding_does_not_count_as_use(vh: VirtualHost) -> None:
    vh.declare_exchange("src", "fanout")
    vh.declare_exchange("dst", "fanout")
    vh.bind("exchange", "dst", "src")
    vh.delete_exchange("dst", if_unused=True)
    assert list(vh.exchanges["src"].bindings) == []


def test_bind_not_found_texts(vh: VirtualHost) -> None:
    with pytest.raises(NotFound) as info:
        vh.bind("queue", "missing", "amq.direct", "k")
    assert info.value.reply_text == "NOT_FOUND - no queue 'missing' in vhost '/'"
    with pytest.raises(NotFound) as info:
        vh.bind("queue", "q", "nox", "k")
    assert info.value.reply_text == "NOT_FOUND - no exchange 'nox' in vhost '/'"
    with pytest.raises(NotFound) as info:  # source reported first when both are missing
        vh.bind("queue", "missing", "nox", "k")
    assert info.value.reply_text == "NOT_FOUND - no exchange 'nox' in vhost '/'"
    with pytest.raises(NotFound) as info:
        vh.bind("exchange", "nodst", "amq.direct", "k")
    assert info.value.reply_text == "NOT_FOUND - no exchange 'nodst' in vhost '/'"
    # removing a binding that cannot exist is unbind-ok, as RabbitMQ answers it
    vh.unbind("queue", "missing", "amq.direct", "k")
    vh.unbind("queue", "q", "nox", "k")
    vh.unbind("exchange", "nodst", "nosrc", "k")


def test_auto_delete_exchange_goes_with_last_binding(vh: VirtualHost) -> None:
    vh.declare_exchange("tmp", "direct", auto_delete=True)
    vh.bind("queue", "q", "tmp", "a")
    vh.bind("queue", "q", "tmp", "b")
    vh.unbind("queue", "q", "tmp", "a")
    assert "tmp" in vh.exchanges
    vh.unbind("queue", "q", "tmp", "b")
    assert "tmp" not in vh.exchanges


def test_queue_delete_removes_bindings_and_auto_delete_exchange(vh: VirtualHost) -> None:
    vh.declare_exchange("tmp", "fanout", auto_delete=True)
    vh.bind("queue", "q", "tmp")
    vh.bind("queue", "q", "amq.fanout")
    vh.delete_queue("q")
    assert "tmp" not in vh.exchanges
    assert list(vh.bindings()) == []
    assert vh.route("amq.fanout", "", dict) == []
