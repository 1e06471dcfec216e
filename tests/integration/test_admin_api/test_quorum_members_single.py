"""A single node's answer to a quorum queue's member operations (docs/cluster.md, "Quorum
queue member operations"): the queue's only member is the node itself, over HTTP and
`sievemq queues`."""

from __future__ import annotations

from sievemq.client.quorum_members import COLUMNS
from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q, queues_cli

from .single_member import check_single_node_cli, check_single_node_http


def test_a_single_node_is_its_quorum_queues_only_member(server: ServerProcess, qname: str) -> None:
    quorum = {"durable": True, "arguments": {"x-queue-type": "quorum"}}
    persistent = {"delivery_mode": 2}
    with client(server) as http:
        assert http.put(f"/api/queues/%2F/{q(qname)}", json=quorum).status_code == 201
        for i in range(3):
            body = {
                "properties": persistent,
                "routing_key": qname,
                "payload": f"m{i}",
                "payload_encoding": "string",
            }
            published = http.post("/api/exchanges/%2F/amq.default/publish", json=body)
            assert published.json() == {"routed": True}
        node = http.get("/api/overview").json()["node"]
        path = f"/api/queues/quorum/%2F/{q(qname)}"
        [member] = http.get(f"{path}/status").json()
        check_single_node_http(
            http, "quorum", node, qname, "is a classic queue: only quorum queues have members"
        )
    assert member == {
        "node": node,
        "role": "leader",
        "epoch": 1,
        "log_end": 3,
        "commit_end": 3,
        "messages": 3,
        "online": True,
    }
    commands = ("quorum_status", "add_member", "delete_member")
    row = ["leader", node, "1", "3", "3", "3", "true"]
    check_single_node_cli(queues_cli, server, commands, "quorum queue", qname, node, COLUMNS, row)
