"""`sievemq queues add_member / delete_member / quorum_status`: RabbitMQ's
``rabbitmq-queues`` commands for a quorum queue's members, as a client of a node's admin API
(any node of the cluster: each answers for all; docs/cluster.md). One line naming the
problem and exit status 1 when the node refuses (an unknown queue or node, the leader's
removal...)."""

from __future__ import annotations

import argparse
from typing import TextIO
from urllib.parse import quote

import httpx

from sievemq.client.replicas import (
    add_commands,
    print_members,
    reason,
    split_url,
    vhost_and_names,
)

# RabbitMQ's quorum_status columns as SieveMQ has them, then whether the node answered
COLUMNS = ("role", "node", "epoch", "log_end", "commit_end", "messages", "online")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands of `sievemq queues`."""
    add_commands(
        parser,
        "queues",
        (
            ("add_member", "[VHOST] QUEUE NODE", "add a member of a quorum queue on a node"),
            ("delete_member", "[VHOST] QUEUE NODE", "remove a node's member of a quorum queue"),
            ("quorum_status", "[VHOST] QUEUE", "each member of a quorum queue, with its log"),
        ),
    )


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one command; 0 done, 1 refused or unreachable, 2 bad arguments."""
    command = args.queues_command
    status = command == "quorum_status"
    named = vhost_and_names(args, f"queues {command}", "QUEUE", not status, err)
    if named is None:
        return 2
    vhost, names = named
    base, auth = split_url(args.url)
    path = f"/api/queues/quorum/{quote(vhost, safe='')}/{quote(names[0], safe='')}"
    try:
        with httpx.Client(base_url=base, auth=auth, timeout=30) as http:
            if status:
                answer = http.get(f"{path}/status")
            elif command == "add_member":
                answer = http.post(f"{path}/replicas/add", json={"node": names[1]})
            else:
                body = {"node": names[1]}
                answer = http.request("DELETE", f"{path}/replicas/delete", json=body)
    except httpx.HTTPError as error:
        print(f"sievemq queues {command}: cannot reach {base}: {error}", file=err)
        return 1
    if answer.status_code >= 300:
        print(f"sievemq queues {command}: {reason(answer)}", file=err)
        return 1
    where = f"quorum queue '{names[0]}' in vhost '{vhost}'"
    if status:
        print_members(answer.json(), args.formatter, COLUMNS, out)
    elif command == "add_member":
        done = "added a member of" if answer.status_code == 201 else "already a member of"
        print(f"node '{names[1]}': {done} {where}", file=out)
    else:
        print(f"node '{names[1]}': its member of {where} removed", file=out)
    return 0
