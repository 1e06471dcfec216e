"""Where queues live in a cluster: two real nodes and a real etcd, real pika clients.

A durable queue is led by the node that declared it, recorded in etcd (epoch 1) before the
declare-ok; the other node knows it (declare-ok, listed in /api/queues with its node) and
a client may bind it through that node (bindings are cluster-wide).
"""

from __future__ import annotations

import pytest
from pika.exceptions import ChannelClosedByBroker

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import channel, closed_with_541, etcd_away, queues, until

STREAM = {"x-queue-type": "stream"}


def test_a_queue_is_led_by_the_node_that_declared_it(nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    on_a = channel(a)
    on_a.queue_declare("orders", durable=True, arguments=STREAM)
    seen = until(lambda: queues(b).get("orders"), "b lists a's queue")
    assert (seen["node"], seen["leader"], seen["leader_epoch"]) == ("a", "a", 1)
    assert (seen["type"], seen["state"]) == ("stream", "running")
    # two nodes: the default x-initial-cluster-size (3) gives it one replica, on b
    assert (seen["members"], seen["online"]) == (["a", "b"], ["a", "b"])
    assert queues(a)["orders"]["node"] == "a"  # a lists its own, as a single node does

    on_b = channel(b)
    assert on_b.queue_declare("orders", passive=True).method.queue == "orders"
    # a declare through b answers declare-ok and makes no second queue of that name
    on_b.queue_declare("orders", durable=True, arguments=STREAM)
    assert queues(b)["orders"]["node"] == "a"
    on_b.queue_bind("orders", "amq.topic", "x")  # bindings are cluster-wide
    on_b.confirm_delivery()
    on_b.basic_publish("amq.topic", "x", b"routed through b by its binding")
    assert until(lambda: queues(a)["orders"].get("messages"), "the message on a") == 1

    on_a.queue_delete("orders")
    until(lambda: "orders" not in queues(b), "b forgets the deleted queue")
    with pytest.raises(ChannelClosedByBroker, match="no queue 'orders'"):
        channel(b).queue_declare("orders", passive=True)


def test_a_durable_classic_queue_is_placed_too(nodes: dict[str, ServerProcess]) -> None:
    channel(nodes["b"]).queue_declare("jobs", durable=True)
    seen = until(lambda: queues(nodes["a"]).get("jobs"), "a lists b's classic queue")
    assert (seen["node"], seen["type"]) == ("b", "classic")
    channel(nodes["a"]).queue_bind("jobs", "amq.direct", "jobs")  # through its non-leader


def test_a_declare_fails_while_etcd_is_away_and_is_recorded_once_it_is_back(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    on_a = channel(nodes["a"])
    with etcd_away(etcd):
        closed_with_541(
            lambda: on_a.queue_declare("late", durable=True, arguments=STREAM),
            "etcd did not record queue 'late'",
        )
    seen = until(lambda: queues(nodes["b"]).get("late"), "b lists it once etcd is back")
    assert seen["node"] == "a"


def test_a_delete_while_etcd_is_away_fails_and_the_record_goes_once_etcd_is_back(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    """The queue is gone on its leader at once; its record must not outlive it (it did: the
    cluster listed a queue nobody held, and its replicas followed it for ever)."""
    channel(nodes["a"]).queue_declare("gone", durable=True, arguments=STREAM)
    until(lambda: queues(nodes["b"]).get("gone"), "b lists a's stream")
    on_a = channel(nodes["a"])
    with etcd_away(etcd):
        closed_with_541(lambda: on_a.queue_delete("gone"), "etcd did not remove queue 'gone'")
    until(lambda: "gone" not in queues(nodes["b"]), "b forgets it once etcd is back")
    until(lambda: "gone" not in queues(nodes["a"]), "a forgets it too")
