"""Which nodes get a new stream's replicas (no etcd here: the records as a node sees them)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sievemq.cluster.placement import Placement, cluster_size


def placement(live: list[str], records: list[dict[str, Any]], me: str = "a") -> Placement:
    found = Placement(
        None,  # type: ignore[arg-type]  # (no etcd: only the view is asked)
        me,
        None,  # type: ignore[arg-type]
        lambda _: None,
        lambda: {name: {} for name in live},
    )
    for i, record in enumerate(records):
        found.records[("/", f"s{i}")] = record
    return found


def test_the_default_is_three_copies_on_the_nodes_holding_fewest_streams() -> None:
    records = [
        {"leader": "b", "replicas": ["c"], "type": "stream"},
        {"leader": "c", "replicas": ["d"], "type": "stream"},
        {"leader": "b", "replicas": [], "type": "classic"},  # not a stream: not counted
    ]
    p = placement(["a", "b", "c", "d", "e"], records)
    # b 1, c 2, d 1, e 0: e, then b and d tie (the first name)
    assert p.choose_replicas("a", "stream", {}) == ["e", "b"]
    assert p.choose_replicas("a", "stream", {"x-initial-cluster-size": 4}) == ["e", "b", "d"]
    assert p.choose_replicas("a", "stream", {"x-initial-cluster-size": 1}) == []


def test_fewer_nodes_than_asked_give_fewer_replicas_and_classic_queues_none() -> None:
    p = placement(["a", "b"], [])
    assert p.choose_replicas("a", "stream", {"x-initial-cluster-size": 5}) == ["b"]
    assert p.choose_replicas("b", "stream", {}) == ["a"]  # placed elsewhere: this node too
    assert p.choose_replicas("a", "classic", {}) == []
    assert p.choose_replicas("a", "quorum", {}) == ["b"]


def test_quorum_queues_take_x_quorum_initial_group_size_and_count_with_streams() -> None:
    records = [
        {"leader": "b", "replicas": ["c"], "type": "quorum"},
        {"leader": "c", "replicas": ["d"], "type": "stream"},
    ]
    p = placement(["a", "b", "c", "d", "e"], records)
    # b 1, c 2, d 1, e 0 (quorum queues and streams alike)
    assert p.choose_replicas("a", "quorum", {}) == ["e", "b"]
    assert p.choose_replicas("a", "quorum", {"x-quorum-initial-group-size": 4}) == [
        "e",
        "b",
        "d",
    ]
    assert p.choose_replicas("a", "quorum", {"x-quorum-initial-group-size": 1}) == []
    # the stream argument is not the quorum queue's
    assert p.choose_replicas("a", "quorum", {"x-initial-cluster-size": 1}) == ["e", "b"]


def test_members_and_online_follow_the_live_nodes() -> None:
    p = placement(["a", "b"], [{"leader": "a", "replicas": ["b", "c"], "type": "stream"}])
    assert p.members("/", "s0") == (["a", "b", "c"], ["a", "b"])
    assert p.replicas("/", "s0") == ["b", "c"]
    assert p.members("/", "nowhere") is None


def test_a_policy_s_initial_cluster_size_applies_unless_the_argument_says() -> None:
    assert cluster_size({}, {"initial-cluster-size": 2}) == 2
    assert cluster_size({"x-initial-cluster-size": 4}, {"initial-cluster-size": 2}) == 4
    assert cluster_size({}, {"initial-cluster-size": 0}) == 3  # not a size: the default
    assert cluster_size({}, None) == 3
    p = placement(["a", "b", "c", "d"], [])
    definitions = {"small": {"initial-cluster-size": 2}}
    vhost = SimpleNamespace(policy_definition=lambda kind, name: definitions.get(name, {}))
    p.broker = SimpleNamespace(vhosts={"/": vhost})  # type: ignore[assignment]
    assert p.choose_replicas("a", "stream", {}, "/", "small") == ["b"]
    assert p.choose_replicas("a", "stream", {"x-initial-cluster-size": 1}, "/", "small") == []
    assert p.choose_replicas("a", "stream", {}, "/", "other") == ["b", "c"]
