"""Stream queues in a vhost, users, persistence across restarts, and the admin facade."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from pathlib import Path

import pytest

from sievemq.amqp.errors import (
    AccessRefused,
    NotAllowed,
    NotFound,
    PreconditionFailed,
    ResourceLocked,
)
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import BindingView, PermissionView
from sievemq.gateway.model import definitions
from sievemq.gateway.model.broker import Broker, BrokerSettings
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.storage import Durability, Message

# these tests are about stream queues: make them the default queue type
STREAMS = BrokerSettings(default_queue_type="stream")


def publish(queue: StreamQueue, n: int, value: str = "") -> None:
    values = (value,) if value else ()
    queue.stream.append([Message(values, "", queue.name, b"", b"m%d" % i) for i in range(n)])


def test_declare_creates_stream_with_arguments(tmp_path: Path) -> None:
    broker = Broker(
        tmp_path, BrokerSettings(durability=Durability.ALWAYS, default_queue_type="stream")
    )
    vh = broker.vhost("/")
    args = {
        "x-queue-type": "stream",
        "x-stream-filter-size-bytes": 64,
        "x-stream-compression": "zstd",
        "x-max-length-bytes": 10_000_000,
        "x-max-age": "1D",
        "x-stream-max-segment-size-bytes": 1_000_000,
    }
    queue, messages, consumers = vh.declare_queue("orders", arguments=args)
    assert (messages, consumers) == (0, 0)
    cfg = queue.stream.config
    assert cfg.filter_size_bytes == 64
    assert cfg.compression == "zstd"
    assert cfg.max_bytes == 10_000_000
    assert cfg.max_age_ms == 86_400_000
    assert cfg.max_segment_bytes == 1_000_000
    assert cfg.durability is Durability.ALWAYS
    assert queue.stream.directory == tmp_path / "streams" / "%2F" / "orders"
    publish(queue, 5)
    again, messages, _ = vh.declare_queue("orders", arguments=args)
    assert again is queue and messages == 5
    _, messages, _ = vh.declare_queue("orders", passive=True)
    assert messages == 5
    broker.close()


def test_declare_errors(tmp_path: Path) -> None:
    vh = Broker(tmp_path, STREAMS).vhost("/")
    vh.declare_queue("s")
    with pytest.raises(NotFound) as nf:
        vh.declare_queue("missing", passive=True)
    assert nf.value.reply_text == "NOT_FOUND - no queue 'missing' in vhost '/'"
    with pytest.raises(AccessRefused) as ar:
        vh.declare_queue("amq.q")
    assert ar.value.reply_text == (
        "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'"
    )
    with pytest.raises(ResourceLocked):
        vh.declare_queue("s", exclusive=True)
    with pytest.raises(PreconditionFailed) as pf:
        vh.declare_queue("s", durable=False)
    assert pf.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 's' in vhost '/': "
        "received 'false' but current is 'true'"
    )
    with pytest.raises(PreconditionFailed) as pf:
        vh.declare_queue("s", auto_delete=True)
    assert "inequivalent arg 'auto_delete'" in pf.value.reply_text
    with pytest.raises(PreconditionFailed) as pf:
        vh.declare_queue("s", arguments={"x-max-age": "1h"})
    assert "inequivalent arg 'x-max-age'" in pf.value.reply_text
    with pytest.raises(PreconditionFailed):
        vh.declare_queue("t", durable=False)
    assert "t" not in vh.queues
    assert not (tmp_path / "streams" / "%2F" / "t").exists()


def test_delete_queue_notifies_then_removes_files(tmp_path: Path) -> None:
    vh = Broker(tmp_path, STREAMS).vhost("/")
    queue, _, _ = vh.declare_queue("s")
    publish(queue, 3)
    directory = queue.stream.directory
    seen: list[tuple[str, bool]] = []

    def listener(q: StreamQueue) -> None:
        seen.append((q.name, directory.exists()))

    def broken(q: StreamQueue) -> None:
        raise RuntimeError("consumer gone")

    queue.consumers.add("consumer-1")
    queue.add_delete_listener(broken)
    queue.add_delete_listener(listener)
    assert vh.delete_queue("s") == 3
    assert seen == [("s", True)]  # called before the files went
    assert queue.deleted
    assert not directory.exists()
    assert vh.delete_queue("s") == 0  # idempotent
    assert vh.route("", "s", dict) == []
    with pytest.raises(NotFound):
        vh.get_queue("s")


def test_message_count(tmp_path: Path) -> None:
    vh = Broker(tmp_path, STREAMS).vhost("/")
    queue, _, _ = vh.declare_queue("s")
    publish(queue, 4, "emea")
    publish(queue, 2)
    assert queue.message_count == 6
    assert queue.consumer_count == 0


def test_restart_restores_definitions_and_data(tmp_path: Path) -> None:
    broker = Broker(tmp_path, STREAMS)
    vh = broker.vhost("/")
    queue, _, _ = vh.declare_queue(
        "orders/eu", arguments={"x-max-age": "7D", "x-stream-filter-size-bytes": 32}
    )
    publish(queue, 7, "emea")
    vh.declare_exchange("events", "topic")
    vh.declare_exchange("transient", "fanout", durable=False)
    vh.declare_exchange("tail", "headers", internal=True)
    vh.bind("queue", "orders/eu", "events", "orders.#")
    vh.bind("exchange", "tail", "events", "t.*")
    vh.bind("queue", "orders/eu", "tail", "", {"x-match": "any", "k": b"\xff", "n": Decimal("1.5")})
    vh.bind("queue", "orders/eu", "transient")  # not durable: not restored
    broker.add_vhost("other")
    broker.users.add("alice", "pw", tags=("monitoring",), vhosts={"other"})
    broker.save_definitions()
    broker.close()

    again = Broker(tmp_path, STREAMS)
    vh2 = again.vhost("/")
    q2 = vh2.get_queue("orders/eu")
    assert q2.message_count == 7
    assert q2.arguments.max_age_ms == 7 * 86_400_000
    assert q2.stream.config.filter_size_bytes == 32
    assert vh2.get_exchange("events").type == "topic"
    assert vh2.get_exchange("tail").internal
    assert "transient" not in vh2.exchanges
    assert [q.name for q in vh2.route("events", "orders.new", dict)] == ["orders/eu"]
    hdrs = {"k": b"\xff"}
    assert [q.name for q in vh2.route("events", "t.x", lambda: hdrs)] == ["orders/eu"]
    assert len(list(vh2.bindings())) == 3
    assert "other" in again.vhosts
    alice = again.authenticate("alice", "pw")
    assert alice is not None and alice.may_use("other") and alice.tags == ("monitoring",)
    # redeclare after restart is equivalent
    vh2.declare_queue("orders/eu", arguments={"x-max-age": "7D", "x-stream-filter-size-bytes": 32})
    vh2.delete_queue("orders/eu")
    again.close()

    third = Broker(tmp_path, STREAMS)
    assert "orders/eu" not in third.vhost("/").queues
    assert not (tmp_path / "streams" / "%2F" / "orders%2Feu").exists()
    third.close()


def test_definitions_are_an_append_log_of_json_lines(tmp_path: Path) -> None:
    broker = Broker(tmp_path, STREAMS)
    before = (tmp_path / "definitions.log").stat().st_size
    broker.vhost("/").declare_queue("s")
    lines = (tmp_path / "definitions.log").read_bytes()[before:].splitlines()
    assert len(lines) == 1  # the declare appended one line, nothing else was rewritten
    assert json.loads(lines[0][9:]) == [
        "put",
        "queues",
        '["/","s"]',
        {"vhost": "/", "name": "s", "arguments": {"x-queue-type": "stream"}},
    ]
    data = definitions.load(tmp_path)
    assert data is not None and data["version"] == 1
    assert data["queues"] == [{"vhost": "/", "name": "s", "arguments": {"x-queue-type": "stream"}}]
    assert not (tmp_path / "definitions.json").exists()
    broker.close()


def test_value_encoding_round_trip() -> None:
    value = {
        "s": "text",
        "b": b"\xff\x00",
        "x": bytearray(b"ab"),
        "t": datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC),
        "d": Decimal("3.14"),
        "l": [1, True, None, 2.5],
    }
    encoded = definitions.encode_value(value)
    assert definitions.decode_value(json.loads(json.dumps(encoded))) == value


def test_safe_names() -> None:
    assert definitions.safe_name("/") == "%2F"
    assert definitions.safe_name("..") == "%2E%2E"
    assert definitions.safe_name("a b") == "a%20b"
    assert definitions.safe_name("") == "%"
    long_a = definitions.safe_name("é" * 120)
    long_b = definitions.safe_name("é" * 119 + "e")
    assert len(long_a) <= 200 and long_a != long_b


def test_users_and_vhost_access(tmp_path: Path) -> None:
    broker = Broker(tmp_path, STREAMS)
    guest = broker.authenticate("guest", "guest")
    assert guest is not None and guest.is_administrator
    assert guest.may_connect_from("127.0.0.1") and guest.may_connect_from("::1")
    assert guest.may_connect_from("::ffff:127.0.0.1")
    assert not guest.may_connect_from("10.0.0.5")
    assert broker.authenticate("guest", "wrong") is None
    assert broker.authenticate("nobody", "guest") is None
    assert broker.open_vhost(guest, "/").name == "/"
    with pytest.raises(NotAllowed) as info:
        broker.open_vhost(guest, "nope")
    assert info.value.reply_text == "NOT_ALLOWED - vhost nope not found"
    broker.add_vhost("private")
    with pytest.raises(NotAllowed) as info:
        broker.open_vhost(guest, "private")
    assert info.value.reply_text == (
        "NOT_ALLOWED - access to vhost 'private' refused for user 'guest'"
    )
    stored = definitions.load(tmp_path)["users"]  # type: ignore[index]
    assert stored[0]["name"] == "guest"
    assert "guest" not in stored[0]["password_hash"]  # only the salted hash is stored


def test_delete_vhost_removes_streams(tmp_path: Path) -> None:
    broker = Broker(tmp_path, STREAMS)
    vh = broker.add_vhost("tenant")
    queue, _, _ = vh.declare_queue("s")
    directory = queue.stream.directory
    assert directory.parent.name == "tenant"
    broker.delete_vhost("tenant")
    assert not directory.exists()
    with pytest.raises(NotFound):
        broker.vhost("tenant")


def test_facade(tmp_path: Path) -> None:
    broker = Broker(tmp_path, STREAMS)
    facade = BrokerFacade(broker)
    view = facade.create_stream("/", "s", {"x-stream-filter-size-bytes": 32})
    assert view.name == "s" and view.messages == 0
    publish(broker.vhost("/").get_queue("s"), 3, "emea")
    got = facade.get_stream("/", "s")
    assert got.messages == 3 and got.chunks == 1 and got.last_offset == 2
    assert got.arguments["x-stream-filter-size-bytes"] == 32
    assert got.filter_stats.chunks_skipped == 0
    assert [s.name for s in facade.list_streams()] == ["s"]
    facade.declare_exchange("/", "ev", "topic")
    facade.bind("/", "ev", "queue", "s", "a.*")
    assert facade.list_bindings("/") == [
        BindingView("/", "", "s", "queue", "s", {}, "s"),  # the default exchange's
        BindingView("/", "ev", "s", "queue", "a.*", {}, "a.*"),
    ]
    assert any(x.name == "amq.topic" for x in facade.list_exchanges("/"))
    overview = facade.overview()
    assert overview.totals.queues == 1 and overview.totals.messages == 3
    with pytest.raises(NotFound):
        facade.get_stream("/", "missing")
    with pytest.raises(NotFound):
        facade.delete_stream("/", "missing")
    assert facade.delete_stream("/", "s") == 3
    facade.put_user("bob", "pw", ("monitoring",))
    facade.set_permission("bob", "/", "^bob-", "", ".*")
    assert [u.tags for u in facade.list_users() if u.name == "bob"] == [["monitoring"]]
    assert facade.list_permissions(user="bob") == [PermissionView("bob", "/", "^bob-", "", ".*")]
    broker.close()
    assert Broker(tmp_path, STREAMS).authenticate("bob", "pw") is not None
