"""A single node's answer to the replica operations (docs/cluster.md, "Stream replica
operations"): the stream's only member is the node itself, over HTTP and `sievemq streams`."""

from __future__ import annotations

from sievemq.client.replicas import COLUMNS
from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q, streams_cli


def test_a_single_node_is_its_streams_only_member(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        assert http.put(f"/api/streams/%2F/{q(qname)}", json={}).status_code == 201
        for i in range(3):
            body = {"payload": f"m{i}"}
            assert http.post(f"/api/streams/%2F/{q(qname)}/messages", json=body).status_code == 200
        node = http.get("/api/overview").json()["node"]
        path = f"/api/queues/%2F/{q(qname)}/replicas"
        [member] = http.get(path).json()
        itself = http.put(f"{path}/{q(node)}")
        other = http.put(f"{path}/elsewhere")
        leader = http.delete(f"{path}/{q(node)}")
        missing = http.get("/api/queues/%2F/no-such-stream/replicas")
        http.put("/api/queues/%2F/" + q(qname + "-classic"), json={"durable": True})
        classic = http.get(f"/api/queues/%2F/{q(qname + '-classic')}/replicas")
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
    assert itself.status_code == 204
    assert (other.status_code, other.json()["reason"]) == (404, "no cluster node 'elsewhere'")
    assert leader.status_code == 409 and "cannot be removed" in leader.json()["reason"]
    assert missing.json()["reason"] == "no stream 'no-such-stream' in vhost '/'"
    assert classic.status_code == 400 and "only streams have replicas" in classic.json()["reason"]

    status = streams_cli(server, "stream_status", "--vhost", "/", qname)
    assert status.returncode == 0, status.stderr
    header, row = status.stdout.strip().splitlines()
    assert header.split() == list(COLUMNS)  # RabbitMQ's, then whether the node answered
    assert row.split() == ["writer", node, "1", "2", "2", "0", "0", "1", "true"]
    added = streams_cli(server, "add_replica", qname, node)
    assert (added.returncode, added.stdout.strip()) == (
        0,
        f"node '{node}': already a member of stream '{qname}' in vhost '/'",
    )
    refused = streams_cli(server, "delete_replica", qname, node)
    assert refused.returncode == 1 and "(HTTP 409)" in refused.stderr
    assert streams_cli(server, "add_replica", qname).returncode == 2  # the node is missing
    both = streams_cli(server, "stream_status", "/", qname, "--vhost", "/")
    assert both.returncode == 2 and "give the vhost once" in both.stderr
