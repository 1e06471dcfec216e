"""A leader that restarts commits only what a majority holds: three real nodes and a real
etcd; pika clients.

A stream (and a quorum queue) led by ``a`` with replicas on ``b`` and ``c``: one message
confirmed (a majority holds it), then both replicas SIGSTOPped and two more published
(written on ``a``, held: no replica took them). ``a`` is SIGKILLed and started again on its
data while its record still names it leader with the same epoch (the leases are long here,
so nobody elects meanwhile). A consumer on ``a`` must get only the first message (and the
HTTP browser show only it) until the replicas are SIGCONTed, take the other two and
acknowledge them; then it gets them too. Counting the restarted leader's whole copy as
committed would have shown messages that a later election could cut away. A stream with
one member commits everything at once, before and after the restart.

(A negative check waits a fixed while: a slow machine can only make it pass more slowly,
never fail it.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import (
    WAIT_S,
    channel,
    get,
    queues,
    running,
    started_nodes,
    stopped,
    until,
)

# long leases: the restart of ``a`` (seconds on a loaded machine) and the replicas' stop
# stay well within them, so no replica stands for election and no node loses its name
LEASE_S = 60
QUIET_S = 3.0  # how long an uncommitted message must stay away
NAMES = ("a", "b", "c")
PERSISTENT = pika.BasicProperties(delivery_mode=2)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def long_lease_nodes(
    etcd: EtcdProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    with started_nodes(etcd, tmp_path_factory.mktemp("nodes"), NAMES, ttl_s=LEASE_S) as procs:
        yield procs


def declare(nodes: dict[str, ServerProcess], name: str, arguments: dict[str, Any]) -> None:
    """``name`` declared on ``a`` once every node runs, and listed with its members online."""
    a = nodes["a"]
    until(lambda: all(running(a).get(n) for n in NAMES), "a sees a, b and c running")
    channel(a).queue_declare(name, durable=True, arguments=arguments)
    size = arguments.get("x-initial-cluster-size", arguments.get("x-quorum-initial-group-size", 3))
    until(
        lambda: len(queues(a).get(name, {}).get("online", [])) == size,
        f"{name} has {size} members online",
    )


def written_on(node: ServerProcess, name: str, count: int) -> None:
    """Wait until ``node`` (the leader) has written ``count`` messages of ``name``."""
    until(
        lambda: queues(node).get(name, {}).get("messages") == count,
        f"{node.data_dir.name} holds {count} messages of {name}",
    )


def publish_confirmed(node: ServerProcess, name: str, body: bytes) -> None:
    ch = channel(node)
    ch.confirm_delivery()
    ch.basic_publish("", name, body, PERSISTENT, mandatory=True)


def publish_unconfirmed(node: ServerProcess, name: str, bodies: list[bytes]) -> None:
    """Published without confirms (a confirm would wait for the stopped replicas)."""
    ch = channel(node)
    for body in bodies:
        ch.basic_publish("", name, body, PERSISTENT)


def restart(node: ServerProcess) -> None:
    """SIGKILL, then started again on its data."""
    node.kill()
    node.start()


class Consumer:
    """A pika consumer on ``node`` (a stream from its first offset) that acks all it gets."""

    def __init__(self, node: ServerProcess, name: str, arguments: dict[str, Any]) -> None:
        self.channel = channel(node)
        self.channel.basic_qos(prefetch_count=100)
        self.got: list[bytes] = []

        def on_message(ch: Any, method: Any, _props: Any, body: bytes) -> None:
            self.got.append(body)
            ch.basic_ack(method.delivery_tag)

        self.channel.basic_consume(name, on_message, arguments=arguments)

    def read_for(self, seconds: float) -> list[bytes]:
        """What arrived after ``seconds`` of listening."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.channel.connection.process_data_events(time_limit=0.1)
        return self.got

    def read_until(self, count: int) -> list[bytes]:
        """Listen until ``count`` messages have arrived (fail after WAIT_S)."""
        deadline = time.monotonic() + WAIT_S
        while len(self.got) < count:
            assert time.monotonic() < deadline, f"only {self.got} arrived of {count}"
            self.channel.connection.process_data_events(time_limit=0.1)
        return self.got


def browsed(node: ServerProcess, name: str) -> list[str]:
    result = get(node, f"/api/streams/%2F/{name}/messages?offset=first&limit=100")
    return [str(m.get("payload", m.get("body"))) for m in result["messages"]]


FIRST = {"x-stream-offset": "first"}


def test_a_restarted_stream_leader_shows_only_what_a_majority_holds(
    long_lease_nodes: dict[str, ServerProcess],
) -> None:
    nodes = long_lease_nodes
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(nodes, "restarted", {"x-queue-type": "stream", "x-initial-cluster-size": 3})
    declare(nodes, "restarted-alone", {"x-queue-type": "stream", "x-initial-cluster-size": 1})
    publish_confirmed(a, "restarted", b"one")
    publish_confirmed(a, "restarted-alone", b"solo one")
    with stopped(b, c):
        publish_unconfirmed(a, "restarted", [b"two", b"three"])
        publish_confirmed(a, "restarted-alone", b"solo two")  # no replica to wait for
        written_on(a, "restarted", 3)
        restart(a)
        consumer = Consumer(a, "restarted", FIRST)
        assert consumer.read_for(QUIET_S) == [b"one"], "a reader saw what no replica holds"
        assert len(browsed(a, "restarted")) == 1  # the HTTP browser neither
        # one member: everything it holds is committed, before and after the restart
        alone = Consumer(a, "restarted-alone", FIRST)
        assert alone.read_until(2) == [b"solo one", b"solo two"]
    # the replicas take the last two chunks from the restarted leader and acknowledge them
    assert consumer.read_until(3) == [b"one", b"two", b"three"]
    assert len(browsed(a, "restarted")) == 3


def test_a_restarted_quorum_leader_delivers_only_what_a_majority_holds(
    long_lease_nodes: dict[str, ServerProcess],
) -> None:
    nodes = long_lease_nodes
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(nodes, "restarted-qq", {"x-queue-type": "quorum"})
    declare(
        nodes, "restarted-qq-alone", {"x-queue-type": "quorum", "x-quorum-initial-group-size": 1}
    )
    publish_confirmed(a, "restarted-qq", b"one")
    publish_confirmed(a, "restarted-qq-alone", b"solo one")
    with stopped(b, c):
        publish_unconfirmed(a, "restarted-qq", [b"two", b"three"])
        publish_confirmed(a, "restarted-qq-alone", b"solo two")
        written_on(a, "restarted-qq", 3)
        restart(a)
        consumer = Consumer(a, "restarted-qq", {})
        assert consumer.read_for(QUIET_S) == [b"one"], "a consumer got what no replica holds"
        alone = Consumer(a, "restarted-qq-alone", {})
        assert alone.read_until(2) == [b"solo one", b"solo two"]
    assert consumer.read_until(3) == [b"one", b"two", b"three"]
