"""The admin facade's typed view of classic queues."""

from __future__ import annotations

from pathlib import Path

from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.model.broker import Broker


def test_facade_lists_classic_queues_with_rabbitmq_fields(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    vhost = broker.vhost("/")
    queue, _, _ = vhost.declare_queue("work", durable=True)
    queue.enqueue([("", "work", b"\x00\x00", b"a"), ("", "work", b"\x00\x00", b"bc")])
    queue.take()
    [view] = BrokerFacade(broker).list_queues("/")
    assert view.name == "work" and view.type == "classic" and view.durable
    assert (view.messages_ready, view.messages_unacknowledged, view.messages) == (1, 1, 2)
    assert view.bytes == 2
    broker.close()
