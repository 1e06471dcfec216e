"""`sievemq queues add_member / delete_member / quorum_status / grow / shrink`: RabbitMQ's
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
# what grow and shrink list: each queue changed, its size after, and the result
RESULTS = ("vhost", "name", "size", "result")


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
    subparsers = members.add_commands(parser, TOOL)
    grow = subparsers.add_parser(
        "grow",
        help="a member on a node for every quorum queue (all, or those with an even size)",
        usage="sievemq queues grow NODE all|even [--vhost-pattern P] [--queue-pattern P]",
    )
    grow.add_argument("node")
    grow.add_argument("strategy", choices=("all", "even"))
    grow.add_argument("--vhost-pattern", default=".*", help="vhosts matching it (default .*)")
    grow.add_argument("--queue-pattern", default=".*", help="queues matching it (default .*)")
    shrink = subparsers.add_parser(
        "shrink",
        help="remove a node's member of every quorum queue",
        usage="sievemq queues shrink NODE",
    )
    shrink.add_argument("node")
    for sub in (grow, shrink):
        sub.add_argument("--formatter", choices=("table", "json"), default="table")
        members.add_url(sub)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one command; 0 done, 1 refused or unreachable (or a queue's change failed), 2
    bad arguments."""
    command = args.queues_command
    if command not in ("grow", "shrink"):
        return members.run(TOOL, args, out, err)
    path = f"/api/queues/quorum/replicas/on/{quote(args.node, safe='')}/{command}"

    def send(http: httpx.Client) -> httpx.Response:
        if command == "shrink":
            return http.delete(path)
        body = {
            "strategy": args.strategy,
            "vhost_pattern": args.vhost_pattern,
            "queue_pattern": args.queue_pattern,
        }
        return http.post(path, json=body)

    answer = members.ask(f"sievemq queues {command}", args.url, send, err, timeout=300)
    if answer is None:
        return 1
    rows = answer.json()
    members.print_members(rows, args.formatter, RESULTS, out)
    return 1 if any(r.get("result") != "ok" for r in rows) else 0
