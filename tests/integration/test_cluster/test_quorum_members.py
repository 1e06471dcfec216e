"""A quorum queue's members added, removed and listed over HTTP and `sievemq queues`
(``rabbitmq-queues add_member / delete_member / quorum_status``, ``grow`` and ``shrink``):
three real nodes and a real etcd. A member added to a two-member queue copies the leader's
log (the live records with the leader's ids and bytes, not the settled ones, read from the
files) and follows it; a removed one stops and its copy goes; ``quorum_status`` lists each
member with its role, log end, commit end and whether its node answers, a stopped node's
member ``online: false``; the refusals name the problem (the leader's removal, an unknown
queue or node, a stream or classic queue, a stopped node).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from sievemq.storage import layout
from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import queues_cli
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.queue_files import live_records

from .cluster_helpers import channel, queues, running, stopped, until
from .test_cluster_listings import cluster_secret
from .test_quorum_replication import confirmed, declare
from .test_replica_ops import status_table

NAMES = ("a", "b", "c")  # the nodes of this module (conftest.nodes)


def path(name: str, tail: str) -> str:
    return f"/api/queues/quorum/%2F/{name}/{tail}"


def http(node: ServerProcess, method: str, where: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(
        method, node.admin_url + where, auth=("guest", "guest"), timeout=30, **kwargs
    )


def add(node: ServerProcess, name: str, member: str) -> httpx.Response:
    return http(node, "POST", path(name, "replicas/add"), json={"node": member})


def delete(node: ServerProcess, name: str, member: str) -> httpx.Response:
    return http(node, "DELETE", path(name, "replicas/delete"), json={"node": member})


def copy_of(node: ServerProcess, name: str) -> dict[int, bytes]:
    """The live records (id -> the record's bytes) of the queue's log on ``node``."""
    return live_records(node.data_dir, "/", name) or {}


def members(node: ServerProcess, name: str) -> tuple[list[str], list[str]] | None:
    row = queues(node).get(name)
    return None if row is None else (row["members"], row["online"])


def settle(node: ServerProcess, name: str, count: int) -> None:
    """Take and ack ``count`` messages through ``node``."""
    ch = channel(node)
    for _ in range(count):
        method, _props, _body = ch.basic_get(name)
        assert method is not None
        ch.basic_ack(method.delivery_tag)


def test_a_member_added_copies_the_log_and_a_removed_one_goes(
    nodes: dict[str, ServerProcess],
) -> None:
    a = nodes["a"]
    declare(a, "grow", **{"x-quorum-initial-group-size": 2})
    first = until(lambda: members(a, "grow"), "a lists the queue")[0]
    assert first[0] == "a" and len(first) == 2
    third = next(n for n in NAMES if n not in first)
    confirmed(a, "grow", [f"m{i}" for i in range(300)])
    settle(a, "grow", 50)  # settled before the member exists: its copy leaves them out

    # added through a node that is not the leader: its own view shows it at once
    via = nodes[first[1]]
    answer = add(via, "grow", third)
    assert answer.status_code == 201, answer.text
    assert members(via, "grow") == ([*first, third], [*first, third])
    for node in nodes.values():
        until(
            lambda n=node: members(n, "grow") == ([*first, third], [*first, third]),  # type: ignore[misc]
            f"{node} lists {third} as a member, online",
        )
    leader_log = copy_of(a, "grow")
    assert len(leader_log) == 250
    until(lambda: copy_of(nodes[third], "grow") == leader_log, "the new member holds a's log")
    confirmed(a, "grow", [f"n{i}" for i in range(100)])  # and follows what comes after
    until(
        lambda: (
            len(copy_of(a, "grow")) == 350
            and copy_of(nodes[third], "grow") == copy_of(a, "grow") == copy_of(via, "grow")
        ),
        "every member holds the same 350 messages",
    )
    assert add(a, "grow", third).status_code == 204  # already one (RabbitMQ: idempotent)

    # quorum_status: every member at the same log end once caught up
    def caught_up() -> list[dict[str, str]] | None:
        done = queues_cli(nodes[third], "quorum_status", "grow")
        assert done.returncode == 0, done.stderr
        rows = status_table(done.stdout)
        return rows if len({r["log_end"] for r in rows}) == 1 else None

    rows = until(caught_up, "quorum_status shows every member at the same log end")
    assert [(r["role"], r["node"]) for r in rows] == [
        ("leader", "a"),
        ("follower", first[1]),
        ("follower", third),
    ]
    end = rows[0]["log_end"]
    assert int(end) >= 400  # 400 ids taken (the settled ones are not reused)
    assert rows[0]["commit_end"] == end  # every confirmed message is committed
    for row in rows:
        assert (row["epoch"], row["messages"], row["online"]) == ("1", "350", "true")
    for row in rows[1:]:
        assert row["commit_end"] == "-"  # a follower does not know where commits end
    as_json = http(a, "GET", path("grow", "status")).json()
    assert [m["node"] for m in as_json] == ["a", first[1], third]
    assert all(m["messages"] == 350 and m["online"] for m in as_json)

    # removed through the command line (vhost given first, as the stream commands take it)
    done = queues_cli(a, "delete_member", "/", "grow", third)
    assert done.returncode == 0, done.stderr
    assert third in done.stdout
    copy = layout.queue_directory(nodes[third].data_dir, "/", "grow")
    until(lambda: not copy.exists(), "the removed member's copy is gone")
    for node in nodes.values():
        until(
            lambda n=node: members(n, "grow") == (first, first),  # type: ignore[misc]
            f"{node} lists the two members left",
        )
    confirmed(a, "grow", ["after"])  # the two members left commit it
    until(lambda: copy_of(via, "grow") == copy_of(a, "grow"), "the other member goes on")
    assert len(copy_of(a, "grow")) == 351 and not copy.exists()

    # added back through the command line: a fresh copy from the start
    done = queues_cli(a, "add_member", "grow", third)
    assert (done.returncode, done.stderr) == (0, "")
    assert "added a member" in done.stdout
    until(lambda: copy_of(nodes[third], "grow") == copy_of(a, "grow"), "added again, caught up")

    # removed and added back at once: the new copy waits for the old one's removal, then
    # copies afresh (it is not opened on the files the removal takes away)
    assert delete(a, "grow", third).status_code == 204
    assert add(a, "grow", third).status_code == 201
    confirmed(a, "grow", ["last"])
    until(
        lambda: (
            len(copy_of(a, "grow")) == 352 and copy_of(nodes[third], "grow") == copy_of(a, "grow")
        ),
        "removed and added back at once, caught up",
    )


def test_refusals_name_the_problem(etcd: EtcdProcess, nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    declare(a, "refusals", **{"x-quorum-initial-group-size": 2})
    until(lambda: members(b, "refusals"), "b lists the queue")
    replica = members(a, "refusals")[0][1]  # type: ignore[index]
    outsider = next(n for n in NAMES if n not in members(a, "refusals")[0])  # type: ignore[index]

    leader = delete(b, "refusals", "a")
    assert leader.status_code == 409
    assert "'a' leads quorum queue 'refusals'" in leader.json()["reason"]
    assert "the leader cannot be removed" in leader.json()["reason"]
    done = queues_cli(b, "delete_member", "refusals", "a")
    assert done.returncode == 1
    assert "the leader cannot be removed" in done.stderr and "HTTP 409" in done.stderr

    unknown_node = add(a, "refusals", "zz")
    assert (unknown_node.status_code, unknown_node.json()["reason"]) == (
        404,
        "no cluster node 'zz'",
    )
    for answer in (add(a, "nope", "b"), http(a, "GET", path("nope", "status"))):
        assert (answer.status_code, answer.json()["reason"]) == (
            404,
            "no queue 'nope' in vhost '/'",
        )
    not_member = delete(a, "refusals", outsider)
    assert not_member.status_code == 404
    assert f"'{outsider}' holds no member of quorum queue 'refusals'" in not_member.json()["reason"]
    no_node = http(a, "POST", path("refusals", "replicas/add"), json={})
    assert no_node.status_code == 400 and "names no node" in no_node.json()["reason"]
    assert http(a, "GET", "/api/queues/quorum/nowhere/refusals/status").status_code == 404

    channel(a).queue_declare("classic-q", durable=True)
    channel(a).queue_declare(
        "stream-q", durable=True, arguments={"x-queue-type": "stream", "x-initial-cluster-size": 1}
    )
    until(lambda: {"classic-q", "stream-q"} <= set(queues(b)), "b lists the other queues")
    for node in (a, b):
        for other, kind in (("classic-q", "a classic queue"), ("stream-q", "a stream")):
            for answer in (add(node, other, "c"), http(node, "GET", path(other, "status"))):
                assert answer.status_code == 400, (other, answer.text)
                reason = answer.json()["reason"]
                assert f"'{other}' in vhost '/' is {kind}: only quorum queues have members" in (
                    reason
                )
    for node, method, where in (
        (a, "PUT", "/api/queues/%2F/refusals/replicas/c"),  # the stream commands' paths
        (b, "GET", "/api/queues/%2F/refusals/replicas"),
    ):
        answer = http(node, method, where)
        assert answer.status_code == 400
        assert answer.json()["reason"].endswith(
            "is a quorum queue: only streams have replicas (a quorum queue's members: "
            "sievemq queues add_member / delete_member)"
        )
    assert members(a, "refusals")[0] == ["a", replica]  # type: ignore[index]

    # the cluster secret reads one node's part of the status, and changes nothing
    secret = {"x-sievemq-cluster-secret": cluster_secret(etcd)}
    for node in NAMES:
        part = httpx.get(
            nodes[node].admin_url + path("refusals", "status"), headers=secret, timeout=30
        )
        assert [m["node"] for m in part.json()] == ([node] if node != outsider else [])
    url = a.admin_url + path("refusals", "replicas/add")
    refused = httpx.post(url, headers=secret, json={"node": outsider}, timeout=30)
    assert refused.status_code == 401

    # only an administrator changes members; a monitoring user sees the status
    http(a, "PUT", "/api/users/watcher", json={"password": "pw", "tags": "monitoring"})
    every = {"configure": ".*", "write": ".*", "read": ".*"}
    http(a, "PUT", "/api/permissions/%2F/watcher", json=every)
    refused = httpx.post(url, auth=("watcher", "pw"), json={"node": outsider}, timeout=30)
    assert refused.status_code == 401
    seen = httpx.get(a.admin_url + path("refusals", "status"), auth=("watcher", "pw"), timeout=30)
    assert seen.status_code == 200 and len(seen.json()) == 2


def test_a_stopped_node_is_listed_offline_and_gets_no_member(
    nodes: dict[str, ServerProcess],
) -> None:
    a = nodes["a"]
    declare(a, "away", **{"x-quorum-initial-group-size": 2})
    follower = until(lambda: members(a, "away"), "a lists the queue")[0][1]
    outsider = next(n for n in NAMES if n not in ("a", follower))
    confirmed(a, "away", ["one"])
    with stopped(nodes[follower], nodes[outsider]):
        until(lambda: not any(running(a)[n] for n in (follower, outsider)), "both leases lapse")
        rows = http(a, "GET", path("away", "status")).json()
        assert [(r["node"], r["role"], r["online"]) for r in rows] == [
            ("a", "leader", True),
            (follower, "follower", False),
        ]
        assert rows[1]["log_end"] is None and rows[1]["messages"] is None
        assert rows[0]["messages"] == 1
        refused = add(a, "away", outsider)
        assert refused.status_code == 409
        assert refused.json()["reason"] == (
            f"cluster node '{outsider}' is not running: a member is added on a running node"
        )
    until(lambda: all(running(a).values()), "every node runs again")
    rows = until(
        lambda: (
            (r := http(a, "GET", path("away", "status")).json())
            and all(m["online"] for m in r)
            and r
        ),
        "both members online again",
    )
    assert [m["log_end"] for m in rows] == [rows[0]["log_end"]] * 2


def test_grow_and_shrink_every_quorum_queue_on_a_node(nodes: dict[str, ServerProcess]) -> None:
    """Last in the module: a shrink goes through every quorum queue, the other tests' too."""
    a = nodes["a"]
    for name, size in (("g-one", 1), ("g-two", 2), ("g-three", 3)):
        declare(a, name, **{"x-quorum-initial-group-size": size})
        until(lambda n=name: members(a, n), f"a lists {name}")  # type: ignore[misc]
        confirmed(a, name, [f"{name}-{i}" for i in range(20)])
    pair = members(a, "g-two")[0]  # type: ignore[index]
    outsider = next(n for n in NAMES if n not in pair)

    # even: only the queue with an even number of members gains one
    done = queues_cli(a, "grow", outsider, "even", "--queue-pattern", "^g-")
    assert done.returncode == 0, done.stderr
    assert status_table(done.stdout) == [
        {"vhost": "/", "name": "g-two", "size": "3", "result": "ok"}
    ]
    until(lambda: members(a, "g-two") == (["a", *pair[1:], outsider],) * 2, "g-two has three")
    until(
        lambda: copy_of(nodes[outsider], "g-two") == copy_of(a, "g-two") != {},
        "the grown member holds g-two's log",
    )
    # all: every matching queue the node is no member of (g-one only, by now)
    grown = http(
        a,
        "POST",
        "/api/queues/quorum/replicas/on/b/grow",
        json={"strategy": "all", "queue_pattern": "^g-", "vhost_pattern": "^/$"},
    )
    assert grown.status_code == 200, grown.text
    assert grown.json() == [{"vhost": "/", "name": "g-one", "size": 2, "result": "ok"}]
    until(lambda: copy_of(nodes["b"], "g-one") == copy_of(a, "g-one") != {}, "b holds g-one")

    # shrink: c leaves every quorum queue it is a member of (as json: each queue's result)
    done = queues_cli(a, "shrink", "c", "--formatter", "json")
    assert done.returncode == 0, done.stderr
    rows = [r for r in json.loads(done.stdout) if r["name"].startswith("g-")]
    assert rows == [
        {"vhost": "/", "name": "g-three", "size": 2, "result": "ok"},
        {"vhost": "/", "name": "g-two", "size": 2, "result": "ok"},
    ]
    for name in ("g-two", "g-three"):
        until(lambda n=name: "c" not in members(a, n)[0], f"c left {name}")  # type: ignore[index,misc]
        copy = layout.queue_directory(nodes["c"].data_dir, "/", name)
        until(lambda d=copy: not d.exists(), f"c's copy of {name} is gone")  # type: ignore[misc]

    # the leader stays: each queue it leads is an error naming it, and exit status 1
    done = queues_cli(a, "shrink", "a", "--formatter", "json")
    assert done.returncode == 1
    led = [r for r in json.loads(done.stdout) if r["name"].startswith("g-")]
    assert [r["name"] for r in led] == ["g-one", "g-three", "g-two"]
    for row in led:
        assert row["result"].startswith("error: cluster node 'a' leads quorum queue"), row
    assert members(a, "g-one")[0] == ["a", "b"]  # type: ignore[index]

    unknown = http(a, "DELETE", "/api/queues/quorum/replicas/on/zz/shrink")
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "no cluster node 'zz'")
    strategy = http(a, "POST", "/api/queues/quorum/replicas/on/b/grow", json={"strategy": "x"})
    assert strategy.status_code == 400 and "strategy" in strategy.json()["reason"]
