"""A stream's replicas added, removed and listed over HTTP and `sievemq streams`
(``rabbitmq-streams add_replica / delete_replica / stream_status``): three real nodes and a
real etcd. An added replica copies the stream from its first chunk and ends byte-identical
to the leader's files; a removed one stops and its copy goes; ``/api/queues`` shows the
members and those online after each change, with a node down and back; a policy's
``initial-cluster-size`` picks the replicas when no argument does.
"""

from __future__ import annotations

from typing import Any

import httpx

from sievemq.cluster.replication import replica_directory
from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import streams_cli
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.stream_client import open_client

from .cluster_helpers import channel, member_added, queues, until
from .test_cluster_listings import cluster_secret
from .test_replication import declare, identical, publish

NAMES = ("a", "b", "c")  # the nodes of this module (conftest.nodes)


def replicas_path(name: str, node: str | None = None) -> str:
    return f"/api/queues/%2F/{name}/replicas" + ("" if node is None else f"/{node}")


def http(node: ServerProcess, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(
        method, node.admin_url + path, auth=("guest", "guest"), timeout=30, **kwargs
    )


def members(node: ServerProcess, name: str) -> tuple[list[str], list[str]] | None:
    row = queues(node).get(name)
    return None if row is None else (row["members"], row["online"])


def status_table(output: str) -> list[dict[str, str]]:
    lines = output.strip().splitlines()
    header = lines[0].split()
    return [dict(zip(header, line.split(), strict=True)) for line in lines[1:]]


async def test_a_replica_added_catches_up_and_removed_goes(
    nodes: dict[str, ServerProcess],
) -> None:
    a = nodes["a"]
    declare(a, "grow", 2)
    first = until(lambda: members(a, "grow"), "a lists the stream")[0]
    assert first[0] == "a" and len(first) == 2
    third = next(n for n in NAMES if n not in first)
    await publish(a, "grow", 0, 3000)  # before the replica exists: it copies from the start

    # added through a node that is not the leader: its own view shows it at once
    via = nodes[first[1]]
    answer = http(via, "PUT", replicas_path("grow", third))
    assert answer.status_code == 201, answer.text
    member_added(via, nodes, "grow", [*first, third])
    until(lambda: identical(a, nodes[third], "grow"), "the new replica holds the leader's files")
    await publish(a, "grow", 3000, 500)  # and follows what comes after
    until(lambda: identical(a, nodes[third], "grow"), "the new replica keeps up")
    assert http(a, "PUT", replicas_path("grow", third)).status_code == 204  # already one

    # stream_status: every member with the same offsets once caught up
    def caught_up() -> list[dict[str, str]] | None:
        done = streams_cli(nodes[third], "stream_status", "grow")
        assert done.returncode == 0, done.stderr
        rows = status_table(done.stdout)
        return rows if all(r["offset"] == "3499" for r in rows) else None

    rows = until(caught_up, "stream_status shows every member at offset 3499")
    assert [(r["role"], r["node"]) for r in rows] == [
        ("writer", "a"),
        ("replica", first[1]),
        ("replica", third),
    ]
    for row in rows:
        assert (row["epoch"], row["first_offset"], row["committed_offset"]) == ("1", "0", "3499")
        assert (row["online"], row["segments"], row["readers"]) == ("true", "1", "0")
    as_json = http(a, "GET", replicas_path("grow")).json()
    assert [m["node"] for m in as_json] == ["a", first[1], third]
    assert all(m["messages"] == 3500 and m["online"] for m in as_json)

    # removed through the command line (vhost given first, as rabbitmq-streams takes it)
    done = streams_cli(a, "delete_replica", "/", "grow", third)
    assert done.returncode == 0, done.stderr
    assert third in done.stdout
    copy = replica_directory(nodes[third].data_dir, "/", "grow")
    until(lambda: not copy.exists(), "the removed replica's copy is gone")
    for node in nodes.values():
        until(
            lambda n=node: members(n, "grow") == (first, first),  # type: ignore[misc]
            f"{node} lists the two members left",
        )
    await publish(a, "grow", 3500, 100)
    until(lambda: identical(a, nodes[first[1]], "grow"), "the other replica goes on")
    assert not copy.exists()

    # added back: a fresh copy from the start
    done = streams_cli(a, "add_replica", "grow", third)
    assert (done.returncode, done.stderr) == (0, "")
    until(lambda: identical(a, nodes[third], "grow"), "the replica added again caught up")


def test_refusals_name_the_problem(etcd: EtcdProcess, nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    declare(a, "refusals", 2)
    until(lambda: members(b, "refusals"), "b lists the stream")
    replica = members(a, "refusals")[0][1]  # type: ignore[index]
    outsider = next(n for n in NAMES if n not in members(a, "refusals")[0])  # type: ignore[index]

    # the cluster secret reads one node's part of the status, and changes nothing
    secret = {"x-sievemq-cluster-secret": cluster_secret(etcd)}
    for node in NAMES:
        part = httpx.get(
            nodes[node].admin_url + replicas_path("refusals"), headers=secret, timeout=30
        )
        assert [m["node"] for m in part.json()] == ([node] if node != outsider else [])
    for method in ("PUT", "DELETE"):
        url = a.admin_url + replicas_path("refusals", replica)
        assert httpx.request(method, url, headers=secret, timeout=30).status_code == 401

    leader = http(b, "DELETE", replicas_path("refusals", "a"))
    assert leader.status_code == 409
    assert "'a' leads stream 'refusals'" in leader.json()["reason"]
    done = streams_cli(b, "delete_replica", "refusals", "a")
    assert done.returncode == 1
    assert "the leader cannot be removed" in done.stderr and "HTTP 409" in done.stderr

    unknown_node = http(a, "PUT", replicas_path("refusals", "zz"))
    assert (unknown_node.status_code, unknown_node.json()["reason"]) == (
        404,
        "no cluster node 'zz'",
    )
    for method, path in (("PUT", replicas_path("nope", "b")), ("GET", replicas_path("nope"))):
        missing = http(a, method, path)
        assert (missing.status_code, missing.json()["reason"]) == (
            404,
            "no stream 'nope' in vhost '/'",
        ), method
    not_member = http(a, "DELETE", replicas_path("refusals", outsider))
    assert not_member.status_code == 404
    assert f"'{outsider}' holds no replica of stream 'refusals'" in not_member.json()["reason"]
    assert members(a, "refusals")[0][0] == "a"  # type: ignore[index]

    channel(a).queue_declare("classic-q", durable=True)
    until(lambda: "classic-q" in queues(b), "b lists the classic queue")
    for node in (a, b):
        classic = http(node, "PUT", replicas_path("classic-q", "c"))
        assert classic.status_code == 400
        assert "is a classic queue: only streams have replicas" in classic.json()["reason"]
    assert http(a, "PUT", "/api/queues/nowhere/refusals/replicas/b").status_code == 404

    # only an administrator changes replicas
    http(a, "PUT", "/api/users/watcher", json={"password": "pw", "tags": "monitoring"})
    every = {"configure": ".*", "write": ".*", "read": ".*"}
    http(a, "PUT", "/api/permissions/%2F/watcher", json=every)
    refused = httpx.put(
        a.admin_url + replicas_path("refusals", outsider), auth=("watcher", "pw"), timeout=30
    )
    assert refused.status_code == 401
    seen = httpx.get(a.admin_url + replicas_path("refusals"), auth=("watcher", "pw"), timeout=30)
    assert seen.status_code == 200 and len(seen.json()) == 2


async def test_a_stream_deleted_through_another_node_loses_its_copies(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(a, "short-lived", 3)
    await publish(a, "short-lived", 0, 100)
    copies = [replica_directory(n.data_dir, "/", "short-lived") for n in (b, c)]
    until(lambda: all(identical(a, n, "short-lived") for n in (b, c)), "both copies made")
    client = await open_client(b)  # b asks a, the leader, through the record
    try:
        await client.delete_stream("short-lived")
    finally:
        await client.close()
    until(lambda: not any(copy.exists() for copy in copies), "both copies removed")


def test_policy_initial_cluster_size_argument_wins(nodes: dict[str, ServerProcess]) -> None:
    a = nodes["a"]
    policy = {
        "pattern": "^sized-",
        "apply-to": "streams",
        "definition": {"initial-cluster-size": 1},
    }
    assert http(a, "PUT", "/api/policies/%2F/one-copy", json=policy).status_code in (201, 204)
    declare(a, "sized-by-policy")
    declare(a, "sized-by-argument", 3)
    declare(nodes["b"], "default-size")  # no policy: 3, every node
    assert until(lambda: members(a, "sized-by-policy"), "listed")[0] == ["a"]
    assert len(until(lambda: members(a, "sized-by-argument"), "listed")[0]) == 3
    assert len(until(lambda: members(a, "default-size"), "listed")[0]) == 3


async def test_members_and_online_with_a_node_down_and_back(
    nodes: dict[str, ServerProcess],
) -> None:
    """Last: it kills a node."""
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(a, "watched", 3)
    everyone = until(lambda: members(a, "watched"), "listed")[0]
    assert sorted(everyone) == ["a", "b", "c"]
    until(lambda: members(b, "watched") == (everyone, everyone), "three members online")
    declare(a, "pair", 2)
    pair = until(lambda: members(a, "pair"), "listed")[0]
    if "c" in pair:
        assert http(a, "DELETE", replicas_path("pair", "c")).status_code == 204
    declare(a, "left-behind", 3)
    await publish(a, "left-behind", 0, 200)
    until(lambda: identical(a, c, "left-behind"), "c holds a copy")
    c.kill()
    up = [n for n in everyone if n != "c"]
    for node in (a, b):
        until(
            lambda n=node: members(n, "watched") == (everyone, up),  # type: ignore[misc]
            f"{node} shows c a member, not online",
        )
    status = {m["node"]: m for m in http(a, "GET", replicas_path("watched")).json()}
    assert status["c"]["online"] is False and status["c"]["offset"] is None
    assert status["b"]["online"] is True and status["b"]["role"] == "replica"
    refused = http(a, "PUT", replicas_path("pair", "c"))  # a stopped node takes no replica
    assert refused.status_code == 409
    assert "'c' is not running" in refused.json()["reason"]
    # c's replica removed while c is down: its copy goes when it comes back
    assert http(b, "DELETE", replicas_path("left-behind", "c")).status_code == 204
    c.restart()
    for node in nodes.values():
        until(
            lambda n=node: members(n, "watched") == (everyone, everyone),  # type: ignore[misc]
            f"{node} shows c online again",
        )
    copy = replica_directory(c.data_dir, "/", "left-behind")
    until(lambda: not copy.exists(), "the copy of the replica removed while c was down is gone")
    assert "c" not in members(c, "left-behind")[0]  # type: ignore[index]
    assert streams_cli(c, "add_replica", "left-behind", "c").returncode == 0
    until(lambda: identical(a, c, "left-behind"), "c copies it anew")
