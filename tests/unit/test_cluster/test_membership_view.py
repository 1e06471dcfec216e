"""The cluster's settings and the member view folded from etcd's events (no etcd here)."""

from __future__ import annotations

import argparse
import json

import pytest
from pydantic import ValidationError

from sievemq.cluster.coordination import Event, KeyValue, WatchBatch, prefix_end
from sievemq.cluster.membership import FIGURES, MEMBERS, NODES, Identity, Membership
from sievemq.settings import add_serve_arguments, settings_error, settings_from_args


def settings_error_of(*argv: str) -> str:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    with pytest.raises(ValidationError) as raised:
        settings_from_args(parser.parse_args(list(argv)))
    return settings_error(raised.value)


def test_cluster_flags_are_checked() -> None:
    assert "needs --node-name" in settings_error_of("--cluster-etcd", "http://127.0.0.1:2379")
    assert "--cluster-etcd: expected URL[,URL...]" in settings_error_of(
        "--node-name", "a", "--cluster-etcd", "127.0.0.1:2379"
    )
    assert "--node-name" in settings_error_of("--node-name", "a b")


def test_several_endpoints_are_kept_in_order() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(
        ["--node-name", "a", "--cluster-etcd", "http://e1:2379, http://e2:2379"]
    )
    assert settings_from_args(args).etcd_endpoints == ["http://e1:2379", "http://e2:2379"]


def test_a_prefix_range_ends_after_every_key_of_the_prefix() -> None:
    assert prefix_end("sievemq/nodes/") == b"sievemq/nodes0"
    assert prefix_end("v/\xff") == b"v/\xc3\xc0"  # UTF-8 c3 bf: the last byte moves on


def kv(key: str, value: object, revision: int) -> KeyValue:
    return KeyValue(key, json.dumps(value).encode(), revision, revision, 1, 0)


def membership() -> Membership:
    return Membership(None, Identity("me", "id-me", "127.0.0.1:1"), 5, dict)  # type: ignore[arg-type]


def test_the_view_lists_members_live_or_stopped_and_itself() -> None:
    view = membership()
    started = {"stats": {"uptime": 1, "fd_used": 7}, "started": 0}
    view.apply(
        WatchBatch(
            [
                Event("put", kv(MEMBERS + "a", {"name": "a"}, 2)),
                Event("put", kv(NODES + "a", started, 3)),
                Event("put", kv(MEMBERS + "b", {"name": "b"}, 4)),
            ],
            4,
        )
    )
    nodes = {n.name: n for n in view.node_views()}
    assert sorted(nodes) == ["a", "b", "me"]
    assert nodes["a"].running and nodes["a"].record["fd_used"] == 7
    assert nodes["a"].record["uptime"] > 1000  # brought up to now from its start
    assert not nodes["b"].running and nodes["b"].record == {}
    assert nodes["me"].running and nodes["me"].local  # even before its own record is seen
    view.apply(WatchBatch([Event("delete", kv(NODES + "a", {}, 5))], 5))
    assert not {n.name: n for n in view.node_views()}["a"].running
    # a reset (etcd lost its history) replaces the whole view
    view.apply(WatchBatch([Event("put", kv(MEMBERS + "c", {"name": "c"}, 1))], 1, reset=True))
    assert [n.name for n in view.node_views()] == ["c", "me"]


def test_a_listener_that_fails_does_not_stop_the_view(caplog: pytest.LogCaptureFixture) -> None:
    """The watch task applies every batch: an exception out of one listener (a placement
    bug) must not end it, or the node would silently stop learning about the cluster."""
    view = membership()
    seen: list[int] = []

    def broken(events: list[Event], reset: bool) -> None:
        seen.append(len(events))
        raise TypeError("a listener's bug")

    view.subscribe("sievemq/queues/", broken)
    queue = Event("put", kv("sievemq/queues/%2F/q", {"name": "q"}, 2))
    view.apply(WatchBatch([queue, Event("put", kv(MEMBERS + "a", {"name": "a"}, 2))], 2))
    view.apply(WatchBatch([Event("put", kv(MEMBERS + "b", {"name": "b"}, 3))], 3))
    assert [n.name for n in view.node_views()] == ["a", "b", "me"]
    assert seen == [1]
    assert "applying the etcd events under sievemq/queues/ failed" in caplog.text


def test_a_stream_this_node_was_elected_to_lead_is_listed_until_it_is_open_here() -> None:
    view = membership()
    view.records["me"] = {"name": "me"}
    records = [
        {"vhost": "/", "name": "promoted", "type": "stream", "leader": "me", "epoch": 2},
        {"vhost": "/", "name": "open", "type": "stream", "leader": "me", "epoch": 1},
        {"vhost": "/", "name": "made", "leader": "me", "state": "creating"},
        {"vhost": "/", "name": "going", "leader": "me", "delete": True},
        {"vhost": "/", "name": "theirs", "type": "classic", "leader": "b", "epoch": 1},
    ]
    view.queue_records = lambda: records
    view.holds_queue = lambda vhost, name: name == "open"
    listed = {q.name: q for q in view.remote_queues("/")}
    assert sorted(listed) == ["promoted", "theirs"]
    assert listed["promoted"].leader == "me" and listed["promoted"].leader_running
    assert listed["promoted"].epoch == 2


def test_a_queue_led_elsewhere_shows_the_figures_of_its_leaders_queues_part() -> None:
    """A node's queues' figures are a part of their own (``sievemq/figures/a/queues``), not
    in its record; a record that still holds them (a node of an earlier version) is read
    too, and a part, even empty, is what its node says now."""
    view = membership()
    records = [
        {"vhost": "/", "name": "q1", "type": "classic", "leader": "a", "epoch": 1},
        {"vhost": "/", "name": "q2", "type": "stream", "leader": "old", "epoch": 1},
    ]
    view.queue_records = lambda: records
    part = [["/", "q1", {"messages": 3}]]
    view.apply(
        WatchBatch(
            [
                Event("put", kv(NODES + "a", {"published": 100.0, "totals": {}}, 2)),
                Event("put", kv(FIGURES + "a/queues", part, 2)),
                Event(
                    "put",
                    kv(NODES + "old", {"totals": {"queues": [["/", "q2", {"messages": 9}]]}}, 3),
                ),
            ],
            3,
        )
    )
    listed = {q.name: q for q in view.remote_queues("/")}
    assert (listed["q1"].figures, listed["q1"].figures_published) == ({"messages": 3}, 100.0)
    assert listed["q2"].figures == {"messages": 9}
    assert {n.name: n.totals for n in view.node_views()}["a"]["queues"] == part
    view.apply(WatchBatch([Event("put", kv(FIGURES + "a/queues", [], 4))], 4))
    assert {q.name: q for q in view.remote_queues("/")}["q1"].figures == {}
