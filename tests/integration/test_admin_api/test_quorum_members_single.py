"""A single node's answer to a quorum queue's member operations (docs/cluster.md, "Quorum
queue member operations"): the queue's only member is the node itself, over HTTP and
`sievemq queues`."""

from __future__ import annotations

from sievemq.client.quorum_members import COLUMNS
from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q, queues_cli


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
        itself = http.post(f"{path}/replicas/add", json={"node": node})
        other = http.post(f"{path}/replicas/add", json={"node": "elsewhere"})
        leader = http.request("DELETE", f"{path}/replicas/delete", json={"node": node})
        missing = http.get("/api/queues/quorum/%2F/no-such-queue/status")
        http.put("/api/queues/%2F/" + q(qname + "-classic"), json={"durable": True})
        classic = http.get(f"/api/queues/quorum/%2F/{q(qname + '-classic')}/status")
    assert member == {
        "node": node,
        "role": "leader",
        "epoch": 1,
        "log_end": 3,
        "commit_end": 3,
        "messages": 3,
        "online": True,
    }
    assert itself.status_code == 204
    assert (other.status_code, other.json()["reason"]) == (404, "no cluster node 'elsewhere'")
    assert leader.status_code == 409 and "cannot be removed" in leader.json()["reason"]
    assert missing.json()["reason"] == "no queue 'no-such-queue' in vhost '/'"
    assert classic.status_code == 400
    assert "is a classic queue: only quorum queues have members" in classic.json()["reason"]

    status = queues_cli(server, "quorum_status", "--vhost", "/", qname)
    assert status.returncode == 0, status.stderr
    header, row = status.stdout.strip().splitlines()
    assert header.split() == list(COLUMNS)
    assert row.split() == ["leader", node, "1", "3", "3", "3", "true"]
    added = queues_cli(server, "add_member", qname, node)
    assert (added.returncode, added.stdout.strip()) == (
        0,
        f"node '{node}': already a member of quorum queue '{qname}' in vhost '/'",
    )
    refused = queues_cli(server, "delete_member", qname, node)
    assert refused.returncode == 1 and "(HTTP 409)" in refused.stderr
    assert queues_cli(server, "add_member", qname).returncode == 2  # the node is missing
    both = queues_cli(server, "quorum_status", "/", qname, "--vhost", "/")
    assert both.returncode == 2 and "give the vhost once" in both.stderr
