"""Publishes passed to the leader as they came (``gateway/session/raw_publish.py``).

Three real nodes and a real etcd; queues led by ``a``, clients (pika, aio-pika) publishing
through ``b`` or ``c``. Once a channel's publish routed to one queue another node leads, its
next publishes of the same exchange and routing key go to the leader unchecked: the leader
answers a malformed one, on the client's own channel, with the reply a single node gives;
routing changes mid-run (a binding moved or removed, the queue deleted, its leader killed)
send the next publishes where they now route, or refuse them clearly; confirms match.
The last test kills ``a``.
"""

from __future__ import annotations

import time
from typing import Any

import aio_pika
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError, UnroutableError

from sievemq.testing import ServerProcess

from .cluster_helpers import (
    WAIT_S,
    channel,
    numbered,
    publish_each,
    publish_pipelined,
    queues,
    read_until_end,
    until,
)
from .test_forwarding import FILTER, STREAM, confirming, declared_on, read_stream

NAMES = ("a", "b", "c")
REPLICATED = {"x-queue-type": "stream", "x-initial-cluster-size": 3}


def refusal(node: ServerProcess, queue: str, headers: dict[str, Any], good: int) -> Any:
    """``good`` confirmed publishes to ``queue`` through ``node``, then one with ``headers``:
    the broker's channel.close (the connection's other channel still confirms)."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    try:
        on, other = conn.channel(), conn.channel()
        on.confirm_delivery()
        other.confirm_delivery()
        for i in range(good):
            on.basic_publish("", queue, f"good {i}".encode(), pika.BasicProperties(headers={}))
        with pytest.raises(ChannelClosedByBroker) as refused:
            on.basic_publish("", queue, b"bad", pika.BasicProperties(headers=headers))
        assert conn.is_open
        other.basic_publish("", queue, b"after", mandatory=True)  # confirmed
        return refused.value.reply_code, refused.value.reply_text
    finally:
        conn.close()


@pytest.mark.parametrize(
    "headers",
    [
        {FILTER: 5},
        {"x-sievemq-publisher": "p", "x-sievemq-publishing-id": "not a number"},
    ],
    ids=["filter-value", "publisher-id"],
)
def test_a_malformed_publish_after_raw_ones_gets_the_leaders_reply_on_its_channel(
    nodes: dict[str, ServerProcess], headers: dict[str, Any]
) -> None:
    a, b = nodes["a"], nodes["b"]
    name = "checked-" + "-".join(headers)
    declared_on(a, b, name, STREAM)
    on_a = refusal(a, name, headers, 20)
    on_b = refusal(b, name, headers, 20)
    assert on_b == on_a and on_a[0] == 406, (on_a, on_b)
    # what was confirmed before the refusal is stored, the refused one is not
    bodies = [body for _, _, body in read_stream(a, name, 42)]
    assert bodies.count(b"bad") == 0 and bodies.count(b"after") == 2
    assert bodies[:20] == [f"good {i}".encode() for i in range(20)] == bodies[21:41]


def test_another_clients_raw_publishes_go_on_while_one_is_refused(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "shared", STREAM)
    steady = confirming(b)
    steady.basic_publish("", "shared", b"steady 0")
    refusal(b, "shared", {FILTER: 5}, 5)
    for i in range(1, 5):
        steady.basic_publish("", "shared", f"steady {i}".encode())
    bodies = [body for _, _, body in read_stream(a, "shared", 11)]
    assert [x for x in bodies if x.startswith(b"steady")] == [
        f"steady {i}".encode() for i in range(5)
    ]


def test_a_binding_moved_then_removed_mid_run(nodes: dict[str, ServerProcess]) -> None:
    """Through b, to exchange ``moves`` bound to ``first`` (led by a): after the binding
    moves to ``second``, the same channel's publishes land there; after it is removed, a
    mandatory publish comes back unroutable."""
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "first", STREAM)
    declared_on(a, b, "second", STREAM)
    admin = channel(b)
    admin.exchange_declare("moves", "direct", durable=True)
    admin.queue_bind("first", "moves", "k")
    on_b = confirming(b)
    publish_each(on_b, "k", numbered("one", 30), exchange="moves")
    admin.queue_unbind("first", "moves", "k")
    admin.queue_bind("second", "moves", "k")
    publish_each(on_b, "k", numbered("two", 30), exchange="moves")
    admin.queue_unbind("second", "moves", "k")
    with pytest.raises(UnroutableError):
        on_b.basic_publish("moves", "k", b"nowhere", mandatory=True)
    assert [body for _, _, body in read_stream(a, "first", 30)] == numbered("one", 30)
    assert [body for _, _, body in read_stream(a, "second", 30)] == numbered("two", 30)


def test_the_queue_deleted_mid_run_refuses_the_next_publishes(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "doomed", STREAM)
    on_b = confirming(b)
    publish_each(on_b, "doomed", numbered("doomed", 20))
    channel(a).queue_delete("doomed")
    # until b hears of the delete, the leader nacks what it is sent; then b returns it
    with pytest.raises((NackError, UnroutableError)):
        on_b.basic_publish("", "doomed", b"late", mandatory=True)
    until(lambda: "doomed" not in queues(b), "b knows doomed is gone")
    with pytest.raises(UnroutableError):
        on_b.basic_publish("", "doomed", b"later", mandatory=True)


def test_pipelined_confirms_match_across_a_remote_and_a_local_queue(
    nodes: dict[str, ServerProcess],
) -> None:
    """aio-pika on b, one channel: 3,000 pipelined publishes alternating in runs between a
    stream a leads (passed on raw) and a classic queue b holds (stored on b): every one is
    acked and each queue holds its own, in order."""
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "far", STREAM)
    channel(b).queue_declare("near", durable=True)
    total = 3000

    def target(i: int) -> str:
        return "near" if (i // 100) % 3 == 2 else "far"

    messages = [
        (target(i), aio_pika.Message(f"{i}".encode(), headers={FILTER: "x"})) for i in range(total)
    ]
    assert publish_pipelined(b, messages) == ["Ack"] * total
    far = [i for i in range(total) if target(i) == "far"]
    near = [i for i in range(total) if target(i) == "near"]
    got = read_stream(a, "far", len(far), {"x-stream-filter": "x"})
    assert [int(body) for _, _, body in got] == far
    on_b = channel(b)
    taken = []
    while (got_one := on_b.basic_get("near", auto_ack=True))[0] is not None:
        taken.append(int(got_one[2]))
    assert taken == near


def test_the_leader_killed_mid_run_publishes_go_to_the_new_leader(
    nodes: dict[str, ServerProcess],
) -> None:
    """A replicated stream led by a, published to through c: a SIGKILLed, c's next publishes
    are nacked until a replica leads it, then confirmed there; every confirmed message is in
    the new leader's stream, in order."""
    a, c = nodes["a"], nodes["c"]
    channel(a).queue_declare("moving", durable=True, arguments=REPLICATED)
    until(lambda: queues(c).get("moving", {}).get("leader") == "a", "c knows moving")
    on_c = confirming(c)
    acked = list(range(200))
    publish_each(on_c, "moving", [f"{i}".encode() for i in acked])
    a.kill()
    deadline = time.monotonic() + 3 * WAIT_S
    i = 200
    after = 0
    while after < 100:
        assert time.monotonic() < deadline, f"{after} confirmed after the kill"
        try:
            on_c.basic_publish("", "moving", f"{i}".encode(), mandatory=True)
            acked.append(i)
            after += 1
        except (NackError, UnroutableError):
            time.sleep(0.05)
        i += 1
    on_c.basic_publish("", "moving", b"end", mandatory=True)
    assert queues(c)["moving"]["leader"] in ("b", "c")
    got = [int(body) for body in read_until_end(c, "moving")]
    kept = set(acked)
    assert [n for n in got if n in kept] == acked  # every confirmed one, in order
