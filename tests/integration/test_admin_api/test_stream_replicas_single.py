"""A single node's answer to the replica operations (docs/cluster.md, "Stream replica
operations"): the stream's only member is the node itself, over HTTP and `sievemq streams`."""

from __future__ import annotations

from sievemq.client.replicas import COLUMNS
from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q, streams_cli

from .single_member import check_single_node_cli, check_single_node_http


def test_a_single_node_is_its_streams_only_member(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        assert http.put(f"/api/streams/%2F/{q(qname)}", json={}).status_code == 201
        for i in range(3):
            body = {"payload": f"m{i}"}
            assert http.post(f"/api/streams/%2F/{q(qname)}/messages", json=body).status_code == 200
        node = http.get("/api/overview").json()["node"]
        path = f"/api/queues/%2F/{q(qname)}/replicas"
        [member] = http.get(path).json()
        check_single_node_http(http, "stream", node, qname, "only streams have replicas")
    assert member == {
        "node": node,
        "role": "writer",
        "epoch": 1,
        "offset": 2,
        "committed_offset": 2,
        "first_offset": 0,
        "readers": 0,
        "segments": 1,
        "messages": 3,
        "bytes": member["bytes"],
        "online": True,
    }
    commands = ("stream_status", "add_replica", "delete_replica")
    row = ["writer", node, "1", "2", "2", "0", "0", "1", "true"]
    check_single_node_cli(streams_cli, server, commands, "stream", qname, node, COLUMNS, row)
