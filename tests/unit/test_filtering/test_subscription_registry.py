"""The subscription registry never reuses or forgets a slot: a failed save is refused and
rolled back, an unreadable subscriptions.json disables skipping instead of starting over."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.amqp import errors
from sievemq.filtering.subscriptions import (
    FILE,
    RegistryError,
    SubscriptionRegistry,
    registry,
    write_file,
)
from sievemq.gateway.model.stream.arguments import parse_consumer_arguments
from sievemq.gateway.session.stream.consume_setup import consumer_extras
from sievemq.storage import Stream, StreamConfig

EXPR = "region = 'apac'"


def test_a_registration_that_cannot_be_saved_is_refused_and_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = SubscriptionRegistry(tmp_path)
    assert reg.register("a", "x = 1") == 0

    def disk_full(self: SubscriptionRegistry) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SubscriptionRegistry, "_save", disk_full)
    with pytest.raises(RegistryError, match="No space left"):
        reg.register("b", EXPR)
    with pytest.raises(RegistryError):
        reg.register("a", EXPR)  # would deactivate slot 0 and add slot 1
    # nothing of the refused registrations is used: no slot 1, slot 0 still active
    assert [(s.name, s.expression, s.active) for s in reg.slots] == [("a", "x = 1", True)]
    assert reg.extra_for([]) == b"\x00\x01\x00"
    monkeypatch.undo()
    assert reg.register("b", EXPR) == 1
    assert [s.name for s in SubscriptionRegistry(tmp_path).slots] == ["a", "b"]


def test_a_consume_whose_subscription_cannot_be_saved_fails_with_541(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = Stream.open(tmp_path / "s", StreamConfig())
    monkeypatch.setattr(
        SubscriptionRegistry, "_save", lambda self: (_ for _ in ()).throw(OSError(5, "EIO"))
    )
    args = {"x-stream-filter-sql": EXPR, "x-stream-consumer-name": "billing"}
    options = parse_consumer_arguments(args, "s", "/")
    with pytest.raises(errors.InternalError) as caught:
        consumer_extras(options, stream, None)
    assert caught.value.reply_code == 541
    assert "cannot register the SQL subscription of consumer 'billing'" in caught.value.reply_text
    assert registry(stream).slots == []
    stream.close()


def test_an_unreadable_registry_disables_skipping_and_is_kept(tmp_path: Path) -> None:
    stream = Stream.open(tmp_path / "s", StreamConfig())
    path = stream.directory / FILE
    path.write_text('{"version": 1, "slots": [{"id": "x", "na')  # torn or corrupted
    reg = registry(stream)
    assert reg.disabled
    # a new SQL named consumer is served without chunk bits: SQL runs on every chunk
    args = {"x-stream-filter-sql": EXPR, "x-stream-consumer-name": "billing"}
    extras = consumer_extras(parse_consumer_arguments(args, "s", "/"), stream, None)
    assert extras.predicate is not None
    assert extras.chunk_filter is None and extras.subscription_slot is None
    assert reg.extra_for([]) == b""  # new chunks carry no bits either
    reg.forget("billing")
    assert path.read_text() == '{"version": 1, "slots": [{"id": "x", "na'  # left for an operator
    stream.close()


def test_listeners_get_each_saved_file_and_a_copy_written_so_loads_the_same(
    tmp_path: Path,
) -> None:
    reg = SubscriptionRegistry(tmp_path / "leader")
    (tmp_path / "leader").mkdir()
    heard: list[bytes] = []
    reg.listeners.append(heard.append)
    reg.register("a", "x = 1")
    reg.register("a", "x = 1")  # unchanged: no save, nothing told
    reg.register("b", EXPR)
    assert len(heard) == 2 and heard[-1] == (tmp_path / "leader" / FILE).read_bytes()
    (tmp_path / "copy").mkdir()
    write_file(tmp_path / "copy", heard[-1])  # a replica taking the leader's registry
    copy = SubscriptionRegistry(tmp_path / "copy")
    assert [(s.id, s.name, s.active) for s in copy.slots] == [
        (s.id, s.name, s.active) for s in reg.slots
    ]
