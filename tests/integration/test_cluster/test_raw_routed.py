"""Raw forwarding of publishes that route to several queues one other node leads
(``gateway/session/raw_publish.py``, ``session.peer.RoutedChannel``).

Three real nodes and a real etcd; queues led by ``a`` (and one by ``c``), pika clients
publishing through ``b``. A fanout or topic publish whose queues are all ``a``'s goes to ``a``
once, as it came, and ``a`` routes it to its queues: each queue holds every confirmed
message in order, ``b``'s link to ``a`` shows the routed channel, and a malformed message
gets the leader's reply. A headers exchange whose queues are all ``a``'s is routed by ``a``.
A binding to a queue ``c`` leads, added mid-run, sends the next
publishes the ordinary way to both nodes; a queue deleted on ``a`` mid-run: the publishes
sent before ``b`` knew are nacked by ``a`` (never confirmed with a copy missing).
"""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError, UnroutableError

from sievemq.testing import ServerProcess

from .cluster_helpers import channel, get, publish_each, queues, read_until_end, until
from .test_forwarding import FILTER, STREAM, confirming, declared_on, read_stream

NAMES = ("a", "b", "c")
SINGLE = {**STREAM, "x-initial-cluster-size": 1}  # no replica: a alone holds it


def links_of(node: ServerProcess) -> dict[str, dict[str, Any]]:
    """``node``'s inter-node links (``/api/nodes/NAME``' ``sievemq.links``) by peer."""
    me = get(node, f"/api/nodes/{node.data_dir.name}")
    return {link["node"]: link for link in me["sievemq"]["links"]}


def routed_channels(node: ServerProcess, peer: str) -> int:
    return int(links_of(node).get(peer, {}).get("channels", {}).get("routed", 0))


def fan(node: ServerProcess, exchange: str, kind: str, bound: list[tuple[str, str]]) -> None:
    admin = channel(node)
    admin.exchange_declare(exchange, kind, durable=True)
    for queue, key in bound:
        admin.queue_bind(queue, exchange, key)


def fan_of_a(
    nodes: dict[str, ServerProcess], exchange: str, kind: str, bound: list[tuple[str, str]]
) -> Any:
    """The queues of ``bound`` declared on a (one copy each, once b knows them) and bound to
    ``exchange`` through b: a channel on b in confirm mode, to publish to it."""
    a, b = nodes["a"], nodes["b"]
    for queue in dict.fromkeys(queue for queue, _ in bound):
        declared_on(a, b, queue, SINGLE)
    fan(b, exchange, kind, bound)
    return confirming(b)


def numbers(which: range) -> list[bytes]:
    """Bodies ``0``, ``1``, ...: read back as the numbers they were published as."""
    return [f"{i}".encode() for i in which]


def test_a_fanout_to_two_queues_of_one_leader_goes_raw_once(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    on_b = fan_of_a(nodes, "fan", "fanout", [("fan-1", ""), ("fan-2", "")])
    for i in range(300):
        props = pika.BasicProperties(headers={FILTER: "even" if i % 2 == 0 else "odd"})
        on_b.basic_publish("fan", "", f"{i}".encode(), props, mandatory=True)
    assert routed_channels(b, "a") >= 1
    for name in ("fan-1", "fan-2"):
        assert [int(body) for _, _, body in read_stream(a, name, 300)] == list(range(300))
        even = read_stream(b, name, 150, {"x-stream-filter": "even"})
        assert [int(body) for _, _, body in even] == list(range(0, 300, 2))
    # a malformed filter value: the leader's reply, as a single node gives it
    with pytest.raises(ChannelClosedByBroker) as refused:
        on_b.basic_publish("fan", "", b"bad", pika.BasicProperties(headers={FILTER: 5}))
    on_a = confirming(a)
    with pytest.raises(ChannelClosedByBroker) as on_leader:
        on_a.basic_publish("fan", "", b"bad", pika.BasicProperties(headers={FILTER: 5}))
    assert (refused.value.reply_code, refused.value.reply_text) == (
        on_leader.value.reply_code,
        on_leader.value.reply_text,
    )
    assert refused.value.reply_code == 406


def test_a_transient_queue_on_the_leader_does_not_disturb_the_count(
    nodes: dict[str, ServerProcess],
) -> None:
    """A fanout to two streams of a and a transient queue a holds (not recorded in etcd, so
    b does not route to it): b's raw publishes are confirmed and stored in both streams; the
    transient queue gets a's own clients' only, raw or not (as on the ordinary path)."""
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "with-1", SINGLE)
    declared_on(a, b, "with-2", SINGLE)
    on_a = channel(a)
    on_a.queue_declare("with-transient", durable=False)
    fan(a, "with", "fanout", [("with-1", ""), ("with-2", ""), ("with-transient", "")])
    until(lambda: fanned(b, "with") >= 2, "b knows both streams are bound")
    on_b = confirming(b)
    publish_each(on_b, "", numbers(range(100)), exchange="with")
    assert routed_channels(b, "a") >= 1
    confirming(a).basic_publish("with", "", b"from a", mandatory=True)
    for name in ("with-1", "with-2"):
        got = [body for _, _, body in read_stream(a, name, 101)]
        assert got == [f"{i}".encode() for i in range(100)] + [b"from a"]
    assert on_a.basic_get("with-transient", auto_ack=True)[2] == b"from a"
    assert on_a.basic_get("with-transient", auto_ack=True)[0] is None


def fanned(node: ServerProcess, exchange: str) -> int:
    """How many bindings of ``exchange`` ``node`` lists."""
    return len(get(node, f"/api/exchanges/%2F/{exchange}/bindings/source"))


def test_a_topic_publish_routed_to_a_queue_of_another_node_mid_run(
    nodes: dict[str, ServerProcess],
) -> None:
    """Topic ``logs.*`` to two queues of a, raw; a queue c leads bound mid-run: the next
    publishes reach all three (the ordinary way); unbound again, they reach a's two (a
    channel asks once per publish method whether it may go raw: a new one goes raw)."""
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declared_on(c, b, "topic-c", SINGLE)
    on_b = fan_of_a(nodes, "logs", "topic", [("topic-1", "logs.*"), ("topic-2", "#")])
    publish_each(on_b, "logs.info", numbers(range(100)), exchange="logs")
    raw_before = routed_channels(b, "a")
    assert raw_before >= 1
    channel(b).queue_bind("topic-c", "logs", "logs.info")
    publish_each(on_b, "logs.info", numbers(range(100, 200)), exchange="logs")
    channel(b).queue_unbind("topic-c", "logs", "logs.info")
    publish_each(on_b, "logs.info", numbers(range(200, 300)), exchange="logs")
    for name in ("topic-1", "topic-2"):
        assert [int(body) for _, _, body in read_stream(a, name, 300)] == list(range(300))
    assert [int(body) for _, _, body in read_stream(c, "topic-c", 100)] == list(range(100, 200))
    fresh = confirming(b)
    publish_each(fresh, "logs.info", numbers(range(300, 310)), exchange="logs")
    on_b.close()
    until(lambda: routed_channels(b, "a") == 1, "b forwards the new channel's raw to a")
    for name in ("topic-1", "topic-2"):
        assert [int(body) for _, _, body in read_stream(a, name, 310)] == list(range(310))


def test_a_headers_exchange_whose_queues_one_node_leads_is_routed_there(
    nodes: dict[str, ServerProcess],
) -> None:
    """Headers exchange to two streams of a: each message goes raw to a, which routes it by
    its headers; one that routes nowhere is confirmed and dropped, or returned when
    mandatory (that one takes the ordinary path on b)."""
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "hdr-1", SINGLE)
    declared_on(a, b, "hdr-2", SINGLE)
    admin = channel(b)
    admin.exchange_declare("hdr", "headers", durable=True)
    for queue, kinds in (("hdr-1", ("one", "both")), ("hdr-2", ("two", "both"))):
        for kind in kinds:
            admin.queue_bind(queue, "hdr", "", arguments={"x-match": "all", "kind": kind})
    kinds = ("one", "two", "both", "none")
    on_b = confirming(b)
    for i in range(200):
        props = pika.BasicProperties(headers={"kind": kinds[i % 4]})
        on_b.basic_publish("hdr", "", f"{i}".encode(), props)
    assert routed_channels(b, "a") >= 1
    with pytest.raises(UnroutableError):
        on_b.basic_publish("hdr", "", b"x", pika.BasicProperties(headers={"kind": "no"}), True)
    one = [i for i in range(200) if kinds[i % 4] in ("one", "both")]
    two = [i for i in range(200) if kinds[i % 4] in ("two", "both")]
    assert [int(body) for _, _, body in read_stream(a, "hdr-1", len(one))] == one
    assert [int(body) for _, _, body in read_stream(a, "hdr-2", len(two))] == two
    on_b.basic_publish("hdr", "", b"end", pika.BasicProperties(headers={"kind": "one"}))
    assert [int(body) for body in read_until_end(a, "hdr-1")] == one


def test_a_queue_deleted_on_the_leader_mid_run_nacks_what_b_sent_before_it_knew(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    on_b = fan_of_a(nodes, "pair", "direct", [("kept", "k"), ("dropped", "k")])
    publish_each(on_b, "k", numbers(range(50)), exchange="pair")
    channel(a).queue_delete("dropped")
    confirmed = list(range(50))
    for i in range(50, 250):
        try:
            on_b.basic_publish("pair", "k", f"{i}".encode(), mandatory=True)
            confirmed.append(i)
        except NackError:
            pass  # sent to a before b heard of the delete: a nacks it
    until(lambda: "dropped" not in queues(b), "b knows dropped is gone")
    on_b.basic_publish("pair", "k", b"end", mandatory=True)
    got = [int(body) for body in read_until_end(a, "kept")]
    kept = set(confirmed)
    assert [n for n in got if n in kept] == confirmed  # every confirmed one, in order
