"""Exclusive queues cluster-wide: real nodes, a real etcd, pika.

An exclusive queue lives on its owner connection's node; through any other node a declare
(passive or not), consume, get, purge or delete of its name is 405 RESOURCE_LOCKED, as
RabbitMQ answers every connection but the owner, and no second queue of that name is made.
The name is free again once the owner's connection closes, or its node dies (the record is
held under the node's lease).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import OPEN, channel, cluster_args, queues, until


def reply_code(node: ServerProcess, use: Callable[[Any], object]) -> int:
    """What ``use`` of a fresh channel on ``node`` answers: 200, or the channel's close."""
    try:
        use(channel(node))
    except ChannelClosedByBroker as closed:
        return int(closed.reply_code)
    return 200


def passive(name: str) -> Callable[[Any], object]:
    return lambda ch: ch.queue_declare(name, passive=True)


def test_another_node_answers_405_for_an_exclusive_queue(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    owner = channel(a)
    owner.queue_declare("mine", exclusive=True)
    server_named = owner.queue_declare("", exclusive=True).method.queue
    for name in ("mine", server_named):
        until(lambda n=name: reply_code(b, passive(n)) == 405, f"b locks {name}")  # type: ignore[misc]
    assert reply_code(b, lambda ch: ch.queue_declare("mine")) == 405
    assert reply_code(b, lambda ch: ch.queue_declare("mine", exclusive=True)) == 405
    assert reply_code(b, lambda ch: ch.basic_get("mine")) == 405
    assert reply_code(b, lambda ch: ch.basic_consume("mine", lambda *_: None)) == 405
    assert reply_code(b, lambda ch: ch.queue_purge("mine")) == 405
    assert reply_code(b, lambda ch: ch.queue_delete("mine")) == 405
    assert reply_code(b, lambda ch: ch.basic_consume(server_named, lambda *_: None)) == 405
    with pytest.raises(ChannelClosedByBroker) as locked:
        channel(b).basic_get("mine")
    assert "cannot obtain exclusive access to locked queue 'mine'" in locked.value.reply_text
    assert "mine" not in queues(b) or queues(b)["mine"].get("node") == "a"
    # the owner uses it as ever
    owner.basic_publish("", "mine", b"hello")
    assert owner.basic_get("mine", auto_ack=True)[2] == b"hello"


def test_the_name_is_free_once_its_owner_closes(nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    conn = pika.BlockingConnection(pika.URLParameters(a.url))
    conn.channel().queue_declare("short", exclusive=True, auto_delete=True)
    until(lambda: reply_code(b, passive("short")) == 405, "b locks it")
    conn.close()
    until(lambda: reply_code(b, passive("short")) == 404, "b sees it gone")
    # b's own client may take the name now, exclusively, and a answers 405 in turn
    channel(b).queue_declare("short", exclusive=True)
    until(lambda: reply_code(a, passive("short")) == 405, "a locks b's")


def test_a_dead_node_s_exclusive_queues_vanish_with_its_lease(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> None:
    b = nodes["b"]
    victim = ServerProcess(tmp_path_factory.mktemp("c") / "c", cluster_args(etcd, "c")).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(victim.url))
        OPEN.append(conn)
        conn.channel().queue_declare("orphan", exclusive=True)
        until(lambda: reply_code(b, passive("orphan")) == 405, "b locks c's queue")
    finally:
        victim.kill()
    until(lambda: reply_code(b, passive("orphan")) == 404, "c's lease ended: the name is free")
