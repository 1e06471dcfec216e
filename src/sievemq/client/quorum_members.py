"""`sievemq queues add_member / delete_member / quorum_status`: RabbitMQ's
``rabbitmq-queues`` commands for a quorum queue's members, as a client of a node's admin API
(any node of the cluster: each answers for all; docs/cluster.md; what they share with
`sievemq streams`: ``client/members.py``)."""

from __future__ import annotations

import argparse
from typing import TextIO
from urllib.parse import quote

import httpx

from sievemq.client import members

# RabbitMQ's quorum_status columns as SieveMQ has them, then whether the node answered
COLUMNS = ("role", "node", "epoch", "log_end", "commit_end", "messages", "online")


def _send(
    http: httpx.Client, command: str, vhost: str, queue: str, node: str | None
) -> httpx.Response:
    path = f"/api/queues/quorum/{quote(vhost, safe='')}/{quote(queue, safe='')}"
    if node is None:
        return http.get(f"{path}/status")
    if command == "add_member":
        return http.post(f"{path}/replicas/add", json={"node": node})
    return http.request("DELETE", f"{path}/replicas/delete", json={"node": node})


COMMANDS = (
    ("add_member", "[VHOST] QUEUE NODE", "add a member of a quorum queue on a node"),
    ("delete_member", "[VHOST] QUEUE NODE", "remove a node's member of a quorum queue"),
    ("quorum_status", "[VHOST] QUEUE", "each member of a quorum queue, with its log"),
)

TOOL = members.Tool(
    name="queues",
    queue="QUEUE",
    noun="quorum queue",
    member="member",
    add="add_member",
    status="quorum_status",
    columns=COLUMNS,
    commands=COMMANDS,
    send=_send,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands of `sievemq queues`."""
    members.add_commands(parser, TOOL)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one command; 0 done, 1 refused or unreachable, 2 bad arguments."""
    return members.run(TOOL, args, out, err)
