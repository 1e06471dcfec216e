"""What a single node answers alike to a stream's replica operations and a quorum queue's
member operations, over HTTP and through `sievemq streams` / `sievemq queues`: the node is
the queue's only member."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import httpx

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import q

Cli = Callable[..., subprocess.CompletedProcess[str]]


def check_single_node_http(
    http: httpx.Client, kind: str, node: str, qname: str, classic_reason: str
) -> None:
    """The changes of ``qname``'s members in vhost / (a ``kind``: "stream" or "quorum"):
    adding ``node`` again is a no-op (204), another node is unknown (404) and the leader
    stays (409); a missing queue's status is a 404 naming it, and a classic queue's a 400
    saying ``classic_reason``."""
    if kind == "stream":
        missing_name, missing_reason = "no-such-stream", "no stream 'no-such-stream' in vhost '/'"
        itself = http.put(f"/api/queues/%2F/{q(qname)}/replicas/{q(node)}")
        other = http.put(f"/api/queues/%2F/{q(qname)}/replicas/elsewhere")
        leader = http.delete(f"/api/queues/%2F/{q(qname)}/replicas/{q(node)}")
    else:
        missing_name, missing_reason = "no-such-queue", "no queue 'no-such-queue' in vhost '/'"
        path = f"/api/queues/quorum/%2F/{q(qname)}/replicas"
        itself = http.post(f"{path}/add", json={"node": node})
        other = http.post(f"{path}/add", json={"node": "elsewhere"})
        leader = http.request("DELETE", f"{path}/delete", json={"node": node})
    missing = http.get(_status_path(kind, missing_name))
    http.put("/api/queues/%2F/" + q(qname + "-classic"), json={"durable": True})
    classic = http.get(_status_path(kind, qname + "-classic"))
    assert itself.status_code == 204
    assert (other.status_code, other.json()["reason"]) == (404, "no cluster node 'elsewhere'")
    assert leader.status_code == 409 and "cannot be removed" in leader.json()["reason"]
    assert (missing.status_code, missing.json()["reason"]) == (404, missing_reason)
    assert classic.status_code == 400 and classic_reason in classic.json()["reason"]


def _status_path(kind: str, name: str) -> str:
    if kind == "stream":
        return f"/api/queues/%2F/{q(name)}/replicas"
    return f"/api/queues/quorum/%2F/{q(name)}/status"


def check_single_node_cli(
    cli: Cli,
    server: ServerProcess,
    commands: tuple[str, str, str],
    noun: str,
    qname: str,
    node: str,
    columns: tuple[str, ...],
    row: list[str],
) -> None:
    """``commands`` (status, add, delete) of ``cli`` on queue ``qname`` (a ``noun``) in
    vhost /: the status lists ``node`` alone as ``row``, adding it again changes nothing,
    removing it (the leader) is refused (1), and names that do not fit are a usage error
    (2)."""
    status_command, add, delete = commands
    status = cli(server, status_command, "--vhost", "/", qname)
    assert status.returncode == 0, status.stderr
    header, line = status.stdout.strip().splitlines()
    assert header.split() == list(columns)  # RabbitMQ's, then whether the node answered
    assert line.split() == row
    added = cli(server, add, qname, node)
    assert (added.returncode, added.stdout.strip()) == (
        0,
        f"node '{node}': already a member of {noun} '{qname}' in vhost '/'",
    )
    refused = cli(server, delete, qname, node)
    assert refused.returncode == 1 and "(HTTP 409)" in refused.stderr
    assert cli(server, add, qname).returncode == 2  # the node is missing
    both = cli(server, status_command, "/", qname, "--vhost", "/")
    assert both.returncode == 2 and "give the vhost once" in both.stderr
