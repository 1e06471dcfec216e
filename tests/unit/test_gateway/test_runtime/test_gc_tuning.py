"""GcFreezer with the real collector: long-lived objects leave the collected generations at
start and after bulk declares, and a deleted queue is still freed (reference counting)."""

from __future__ import annotations

import argparse
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from sievemq.gateway.model.broker import Broker
from sievemq.gateway.runtime.gc_tuning import DECLARED_STEP, GcFreezer
from sievemq.settings import add_serve_arguments, settings_from_args


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "data")
    try:
        yield b
    finally:
        gc.unfreeze()  # the test process keeps collecting as before
        b.close()


def _declare(broker: Broker, names: range) -> None:
    v = broker.vhost("/")
    for i in names:
        v.declare_queue(f"q{i}", durable=False, exclusive=False, auto_delete=False, arguments={})


def _tracked(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_freezes_at_start_and_again_after_bulk_declares(broker: Broker) -> None:
    freezer = GcFreezer(broker)
    _declare(broker, range(3))
    first = broker.vhost("/").classic.queues["q0"]
    assert _tracked(first)
    freezer.freeze(full=True)
    assert freezer.freezes == 1 and gc.get_freeze_count() > 0
    assert not _tracked(first)  # full collections no longer walk it
    _declare(broker, range(3, 3 + DECLARED_STEP - 1))
    freezer.check()
    assert freezer.freezes == 1  # not enough new queues yet
    later = broker.vhost("/").classic.queues[f"q{DECLARED_STEP}"]
    assert _tracked(later)
    _declare(broker, range(3 + DECLARED_STEP - 1, 3 + DECLARED_STEP))
    freezer.check()
    assert freezer.freezes == 2
    assert not _tracked(later)


def test_a_frozen_queue_is_still_freed_when_deleted(broker: Broker) -> None:
    _declare(broker, range(2))
    ref = weakref.ref(broker.vhost("/").classic.queues["q1"])
    GcFreezer(broker).freeze(full=True)
    broker.vhost("/").delete_queue("q1")
    assert ref() is None  # no cycle: reference counting frees it, frozen or not


def test_disabled_leaves_the_collector_alone(broker: Broker) -> None:
    freezer = GcFreezer(broker, enabled=False)
    _declare(broker, range(DECLARED_STEP + 1))
    before = gc.get_freeze_count()
    freezer.freeze(full=True)
    freezer.check()
    assert freezer.freezes == 0 and gc.get_freeze_count() == before


def test_serve_freezes_by_default_and_the_flag_or_env_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    assert settings_from_args(parser.parse_args([])).gc_freeze is True
    assert settings_from_args(parser.parse_args(["--gc-freeze", "off"])).gc_freeze is False
    monkeypatch.setenv("SIEVEMQ_GC_FREEZE", "0")
    assert settings_from_args(parser.parse_args([])).gc_freeze is False
    assert settings_from_args(parser.parse_args(["--gc-freeze", "on"])).gc_freeze is True
