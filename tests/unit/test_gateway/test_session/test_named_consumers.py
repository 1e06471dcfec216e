"""Named consumers: the committed offset advances contiguously; facade get/set/delete."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.amqp.errors import NotFound, PreconditionFailed
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.session.stream.named_consumers import OffsetTracker, resume_offset
from sievemq.storage.offsets import OffsetStore


class _Position:
    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def _tracker(tmp_path: Path, position: int) -> tuple[OffsetTracker, OffsetStore, _Position]:
    store = OffsetStore(tmp_path / "offsets.log")
    pos = _Position(position)
    return OffsetTracker("c1", store, pos, None), store, pos


def test_commit_never_passes_an_unacked_delivery(tmp_path: Path) -> None:
    tracker, store, _ = _tracker(tmp_path, 8)
    for tag, offset in ((1, 5), (2, 6), (3, 7)):
        tracker.delivered(tag, offset)
    tracker.settled(3)  # ack 7 first
    assert store.get("c1") is None
    tracker.settled(1)  # ack 5
    assert store.get("c1") == 5
    tracker.settled(2)  # ack 6: nothing outstanding, up to the reader position
    assert store.get("c1") == 7
    assert resume_offset(store, "c1") == 8


def test_filtered_gaps_do_not_hold_the_commit(tmp_path: Path) -> None:
    tracker, store, pos = _tracker(tmp_path, 3)
    tracker.delivered(1, 2)  # offsets 0, 1 were skipped by the filter
    tracker.settled(1)
    assert store.get("c1") == 2
    pos.value = 100  # the reader scanned 3..99 without a match
    tracker.moved()
    assert store.get("c1") == 99
    tracker.delivered(2, 150)
    pos.value = 151
    tracker.moved()  # an unacked delivery: stays
    assert store.get("c1") == 99
    tracker.settled(2)
    assert store.get("c1") == 150


def test_stored_offsets_survive_reopen(tmp_path: Path) -> None:
    tracker, store, _ = _tracker(tmp_path, 11)
    tracker.delivered(1, 10)
    tracker.settled(1)
    store.close()
    assert OffsetStore(tmp_path / "offsets.log").get("c1") == 10


def test_unknown_tags_are_ignored(tmp_path: Path) -> None:
    tracker, store, _ = _tracker(tmp_path, 1)
    tracker.settled(42)
    assert store.get("c1") is None


def test_facade_get_set_delete_and_removed_with_stream(tmp_path: Path) -> None:
    broker = Broker(tmp_path / "data")
    facade = BrokerFacade(broker)
    facade.create_stream("/", "s1", {})
    with pytest.raises(NotFound):
        facade.get_consumer_offset("/", "s1", "c1")
    facade.set_consumer_offset("/", "s1", "c1", 41)
    assert facade.get_consumer_offset("/", "s1", "c1") == 41
    assert facade.list_consumer_offsets("/", "s1") == {"c1": 41}
    with pytest.raises(PreconditionFailed):
        facade.set_consumer_offset("/", "s1", "c1", -1)
    facade.delete_consumer_offset("/", "s1", "c1")
    assert facade.list_consumer_offsets("/", "s1") == {}
    facade.set_consumer_offset("/", "s1", "c2", 7)
    broker.close()
    broker = Broker(tmp_path / "data")
    facade = BrokerFacade(broker)
    assert facade.get_consumer_offset("/", "s1", "c2") == 7
    facade.delete_stream("/", "s1")
    facade.create_stream("/", "s1", {})
    assert facade.list_consumer_offsets("/", "s1") == {}
    broker.close()
