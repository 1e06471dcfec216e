"""Browsing a stream over the admin facade: the time budget cuts filtered scans only."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.gateway.admin import browse
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.model.broker import Broker, BrokerSettings
from sievemq.storage import Message


def _stream_of_single_message_chunks(tmp_path: Path, n: int) -> tuple[Broker, BrokerFacade]:
    broker = Broker(tmp_path, BrokerSettings(default_queue_type="stream"))
    facade = BrokerFacade(broker)
    facade.create_stream("/", "s", {})
    queue = broker.vhost("/").get_queue("s")
    for i in range(n):  # one append, one chunk
        value = ("hit",) if i % 10 == 0 else ("miss",)
        queue.stream.append([Message(value, "", "s", b"", b"m%d" % i)])
    return broker, facade


def test_an_unfiltered_page_is_whole_however_slow_the_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 single-message chunks take three reads of 16; with a budget already spent (a slow
    machine) the newest 40 still come back complete."""
    broker, facade = _stream_of_single_message_chunks(tmp_path, 40)
    monkeypatch.setattr(browse, "BROWSE_TIME_BUDGET_S", -1.0)
    page = facade.browse("/", "s", limit=40, newest_first=True)
    assert [m.offset for m in page.messages] == list(range(40))
    assert page.stopped_by == "end"
    broker.close()


def test_a_filtered_scan_stops_at_the_budget_after_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filtered scan with its budget spent reads once (16 chunks), answers what it found
    and says it stopped by time, with where to continue."""
    broker, facade = _stream_of_single_message_chunks(tmp_path, 100)
    monkeypatch.setattr(browse, "BROWSE_TIME_BUDGET_S", -1.0)
    page = facade.browse("/", "s", limit=100, filter_values=["hit"])
    assert page.stopped_by == "time" and not page.complete
    assert [m.offset for m in page.messages] == [0, 10]
    assert page.next_offset == 16
    monkeypatch.setattr(browse, "BROWSE_TIME_BUDGET_S", 60.0)
    rest = facade.browse("/", "s", offset=page.next_offset, limit=100, filter_values=["hit"])
    assert [m.offset for m in rest.messages] == list(range(20, 100, 10))
    assert rest.stopped_by == "end"
    broker.close()
