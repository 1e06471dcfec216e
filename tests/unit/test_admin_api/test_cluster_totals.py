"""The cluster's overview: this node's figures plus every other live node's last published
part (nested rates included), exchanges not summed, a stopped node left out; a stream's
figures with every node's replica reads; and every sample of a cluster node's scrape
labelled with its node."""

from __future__ import annotations

import time
from typing import Any

from sievemq.admin_api.cluster_totals import cluster_overview, with_replica_reads
from sievemq.admin_api.metrics import with_node
from sievemq.gateway.admin.views import ClusterNodeView


def _part(messages: int, rate: float, connections: int, exchanges: int) -> dict[str, Any]:
    return {
        "message_stats": {"publish": messages, "publish_details": {"rate": rate}},
        "queue_totals": {"messages": messages, "messages_details": {"rate": 0.0}},
        "object_totals": {"connections": connections, "exchanges": exchanges, "queues": 1},
    }


def _node(name: str, part: dict[str, Any], running: bool = True, age_s: float = 3.0) -> Any:
    return ClusterNodeView(
        name=name,
        running=running,
        local=False,
        record={},
        totals={"overview": {**part, "bytes": 100}},
        published=time.time() - age_s,
    )


def test_live_nodes_are_added_and_say_how_old_their_part_is() -> None:
    mine = {"node": "a", "sievemq": {"bytes": 10, "vhosts": 1}, **_part(5, 1.5, 2, 7)}
    local = ClusterNodeView(name="a", running=True, local=True, record={})
    nodes = [local, _node("b", _part(7, 2.25, 3, 7)), _node("c", _part(100, 9, 9, 7), False)]
    shown = cluster_overview(mine, nodes)
    assert shown["message_stats"] == {"publish": 12, "publish_details": {"rate": 3.8}}
    assert shown["queue_totals"]["messages"] == 12
    assert shown["object_totals"] == {"connections": 5, "exchanges": 7, "queues": 2}
    assert shown["sievemq"]["bytes"] == 110 and shown["sievemq"]["vhosts"] == 1
    sources = shown["sievemq"]["totals_from"]
    assert [s["node"] for s in sources] == ["a", "b"]  # c is stopped: left out
    assert sources[0]["age_ms"] == 0 and 3000 <= sources[1]["age_ms"] < 60_000


def test_every_sample_gets_the_node_label() -> None:
    text = '# HELP a x\n# TYPE a gauge\na 1\nb{} 2\nc{q="x y"} 3\n'
    assert with_node(text, 'n"1') == (
        '# HELP a x\n# TYPE a gauge\na{node="n\\"1"} 1\nb{node="n\\"1"} 2\n'
        'c{node="n\\"1",q="x y"} 3\n'
    )


class _Cluster:
    def __init__(self, nodes: list[ClusterNodeView]) -> None:
        self.nodes = nodes

    def node_views(self) -> list[ClusterNodeView]:
        return self.nodes


class _Facade:
    def __init__(self, mine: dict[tuple[str, str], dict[str, int]], nodes: list[Any]) -> None:
        self.mine = mine
        self.cluster = _Cluster(nodes)

    def replica_reads(self) -> dict[tuple[str, str], dict[str, int]]:
        return self.mine


def test_a_streams_figures_add_every_nodes_replica_reads() -> None:
    def reads(name: str, running: bool, published: Any) -> ClusterNodeView:
        return ClusterNodeView(name, running, False, {}, {"replica_reads": published})

    local = ClusterNodeView(name="a", running=True, local=True, record={})
    one = {"deliver": 3, "deliver_get": 3, "ack": 2, "consumers": 1}
    nodes = [
        local,
        reads("b", True, [["/", "s", one], ["/", "other", one], "junk", ["/", "s"]]),
        reads("c", False, [["/", "s", one]]),  # stopped: left out
        reads("d", True, "junk"),
    ]
    f: Any = _Facade({("/", "s"): {"deliver": 1, "deliver_get": 1, "ack": 1}}, nodes)
    stream = {"vhost": "/", "name": "s", "type": "stream", "consumers": 2}
    rows = [
        {**stream, "message_stats": {"deliver_get": 10}},
        {"vhost": "/", "name": "q", "type": "classic", "message_stats": {"deliver_get": 10}},
        {"vhost": "/", "name": "other", "type": "stream"},
    ]
    shown = with_replica_reads(f, rows)
    assert shown[0]["message_stats"] == {"deliver_get": 14, "deliver": 4, "ack": 3}
    assert shown[0]["consumers"] == 3  # a's 2 and b's reader
    assert shown[1]["message_stats"] == {"deliver_get": 10}
    assert shown[2]["message_stats"] == {"deliver": 3, "deliver_get": 3, "ack": 2}
    assert shown[2]["consumers"] == 1
