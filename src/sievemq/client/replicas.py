"""`sievemq streams add_replica / delete_replica / stream_status`: RabbitMQ's
``rabbitmq-streams`` commands, as a client of a node's admin API (any node of the cluster:
each answers for all; docs/cluster.md; what they share with `sievemq queues`:
``client/members.py``)."""

from __future__ import annotations

import argparse
from typing import TextIO
from urllib.parse import quote

import httpx

from sievemq.client import members

# RabbitMQ's stream_status columns, then whether the member's node answered
COLUMNS = (
    "role",
    "node",
    "epoch",
    "offset",
    "committed_offset",
    "first_offset",
    "readers",
    "segments",
    "online",
)


def _send(
    http: httpx.Client, command: str, vhost: str, stream: str, node: str | None
) -> httpx.Response:
    path = f"/api/queues/{quote(vhost, safe='')}/{quote(stream, safe='')}/replicas"
    if node is None:
        return http.get(path)
    method = http.put if command == "add_replica" else http.delete
    return method(f"{path}/{quote(node, safe='')}")


COMMANDS = (
    ("add_replica", "[VHOST] STREAM NODE", "add a replica of a stream on a node"),
    ("delete_replica", "[VHOST] STREAM NODE", "remove a node's replica of a stream"),
    ("stream_status", "[VHOST] STREAM", "each member of a stream, with its offsets"),
)

TOOL = members.Tool(
    name="streams",
    queue="STREAM",
    noun="stream",
    member="replica",
    add="add_replica",
    status="stream_status",
    columns=COLUMNS,
    commands=COMMANDS,
    send=_send,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands of `sievemq streams` (without one it lists a data directory)."""
    members.add_commands(parser, TOOL)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one command; 0 done, 1 refused or unreachable, 2 bad arguments."""
    return members.run(TOOL, args, out, err)
