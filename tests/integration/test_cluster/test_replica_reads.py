"""AMQP 0-9-1 consumers on a node that holds a replica read its copy there.

Two real nodes and a real etcd: a stream led by ``a`` with a replica on ``b``. A consumer on
``b`` gets what a consumer on ``a`` gets, in order, with the same ``x-stream-offset``s (from
``first``, from an offset, filtered by ``x-stream-filter``, and live as messages arrive); it
reads ``b``'s copy, so it goes on reading it while ``a`` is stopped; a named consumer through
``b`` is still the leader's (it resumes by name); a stream deleted on ``a`` cancels it.
"""

from __future__ import annotations

from typing import Any

import pika

from sievemq.testing import ServerProcess

from .cluster_helpers import channel, declare_replicated, end_offset, queues, until

FILTERS = 5


def publish(node: ServerProcess, name: str, ids: range) -> None:
    """Confirmed publishes, in batches of chunks, each with one of FILTERS filter values."""
    ch = channel(node)
    ch.confirm_delivery()
    for i in ids:
        headers = {"x-stream-filter-value": f"f{i % FILTERS}"}
        ch.basic_publish("", name, b"m%d" % i, pika.BasicProperties(headers=headers))


def replicated(a: ServerProcess, b: ServerProcess, name: str, count: int) -> None:
    declare_replicated(a, b, name, ("a", "b"))
    publish(a, name, range(count))
    until(lambda: end_offset(b, name) == count, f"b's copy holds {count} messages")


def consume(
    node: ServerProcess, name: str, count: int, **arguments: Any
) -> list[tuple[int, bytes]]:
    """(x-stream-offset, body) of the first ``count`` deliveries of a consumer on ``node``."""
    ch = channel(node)
    ch.basic_qos(prefetch_count=200)
    got: list[tuple[int, bytes]] = []
    for method, props, body in ch.consume(name, arguments=arguments, inactivity_timeout=30):
        assert method is not None, f"only {len(got)} of {count} deliveries on {node}"
        got.append((props.headers["x-stream-offset"], body))
        ch.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    ch.cancel()
    return got


def test_a_consumer_on_the_replica_node_gets_what_one_on_the_leader_gets(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    replicated(a, b, "near", 600)
    first = {"x-stream-offset": "first"}
    on_leader = consume(a, "near", 600, **first)
    assert on_leader == [(i, b"m%d" % i) for i in range(600)]
    assert consume(b, "near", 600, **first) == on_leader
    assert consume(b, "near", 100, **{"x-stream-offset": 250}) == on_leader[250:350]
    # filtered: whole matching chunks, as on the leader (the Bloom bits are the leader's)
    filtered = {"x-stream-offset": "first", "x-stream-filter": "f3"}
    leader_f3 = consume(a, "near", 120, **filtered)
    assert consume(b, "near", 120, **filtered) == leader_f3
    assert any(body == b"m3" for _, body in leader_f3)


def test_the_copy_is_read_live_and_while_the_leader_is_down(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    replicated(a, b, "live", 50)
    ch = channel(b)
    ch.basic_qos(prefetch_count=500)
    got: list[int] = []

    def take(n: int) -> None:
        for method, props, _ in ch.consume(
            "live", arguments={"x-stream-offset": "first"}, inactivity_timeout=30
        ):
            assert method is not None, f"{len(got)} deliveries"
            got.append(props.headers["x-stream-offset"])
            ch.basic_ack(method.delivery_tag)
            if len(got) == n:
                return

    take(50)
    publish(a, "live", range(50, 80))  # reach b's consumer through b's follower
    take(80)
    a.stop()  # a consumer through the leader's link would be cancelled now
    try:
        until(lambda: queues(b)["live"]["online"] == ["b"], "b lists a stopped")
        fresh = consume(b, "live", 80, **{"x-stream-offset": "first"})
        assert [offset for offset, _ in fresh] == list(range(80))
    finally:
        a.restart()
    until(lambda: queues(b)["live"]["online"] == ["a", "b"], "a is back")
    publish(a, "live", range(80, 90))
    take(90)
    assert got == list(range(90))


def test_a_named_consumer_through_the_replica_node_is_the_leader_s(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    replicated(a, b, "named", 40)
    named = {"x-stream-offset": "first", "x-stream-consumer-name": "reader"}
    assert [o for o, _ in consume(b, "named", 25, **named)] == list(range(25))
    # its commit is on the leader: a consumer of that name on a resumes after it
    resumed = consume(a, "named", 15, **{"x-stream-consumer-name": "reader"})
    assert [o for o, _ in resumed] == list(range(25, 40))


def test_a_stream_deleted_on_the_leader_cancels_the_replica_s_consumer(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    replicated(a, b, "doomed", 10)
    ch = channel(b)
    ch.basic_qos(prefetch_count=100)
    cancelled: list[str] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    received: list[int] = []

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        received.append(props.headers["x-stream-offset"])
        ch.basic_ack(method.delivery_tag)

    tag = ch.basic_consume("doomed", on_message, arguments={"x-stream-offset": "first"})
    until(lambda: (ch.connection.process_data_events(0.1), len(received) == 10)[1], "10 read")
    channel(a).queue_delete("doomed")
    until(lambda: (ch.connection.process_data_events(0.1), cancelled)[1], "basic.cancel on b")
    assert cancelled == [tag]
