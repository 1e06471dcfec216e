"""`sievemq streams add_replica / delete_replica / stream_status`: RabbitMQ's
``rabbitmq-streams`` commands, as a client of a node's admin API (any node of the cluster:
each answers for all; docs/cluster.md). One line naming the problem and exit status 1 when
the node refuses (an unknown stream or node, the leader's removal...)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, TextIO
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

DEFAULT_URL = "http://guest:guest@127.0.0.1:15672"
COMMANDS = ("add_replica", "delete_replica", "stream_status")
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands of `sievemq streams` (without one it lists a data directory)."""
    add_commands(
        parser,
        "streams",
        (
            ("add_replica", "[VHOST] STREAM NODE", "add a replica of a stream on a node"),
            ("delete_replica", "[VHOST] STREAM NODE", "remove a node's replica of a stream"),
            ("stream_status", "[VHOST] STREAM", "each member of a stream, with its offsets"),
        ),
    )


def add_commands(
    parser: argparse.ArgumentParser, tool: str, commands: tuple[tuple[str, str, str], ...]
) -> None:
    """Subcommands (name, arguments, help) of `sievemq TOOL` (``args.TOOL_command``), each
    taking names, ``--vhost`` and ``--url``; a ``..._status`` one a ``--formatter`` too."""
    subparsers = parser.add_subparsers(dest=f"{tool}_command", metavar="COMMAND")
    for command, args, text in commands:
        sub = subparsers.add_parser(command, help=text, usage=f"sievemq {tool} {command} {args}")
        sub.add_argument("names", nargs="+", metavar="NAME", help=args)
        sub.add_argument("--vhost", default=None, help="the vhost (default /)")
        sub.add_argument(
            "--url",
            default=os.environ.get("SIEVEMQ_ADMIN_URL", DEFAULT_URL),
            help="a node's admin API, http://user:pass@host:port (default $SIEVEMQ_ADMIN_URL "
            f"or {DEFAULT_URL})",
        )
        if command.endswith("_status"):
            sub.add_argument("--formatter", choices=("table", "json"), default="table")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one command; 0 done, 1 refused or unreachable, 2 bad arguments."""
    command = args.streams_command
    named = vhost_and_names(args, f"streams {command}", "STREAM", command != "stream_status", err)
    if named is None:
        return 2
    vhost, names = named
    base, auth = split_url(args.url)
    path = f"/api/queues/{quote(vhost, safe='')}/{quote(names[0], safe='')}/replicas"
    try:
        with httpx.Client(base_url=base, auth=auth, timeout=30) as http:
            if command == "stream_status":
                answer = http.get(path)
            else:
                node = quote(names[1], safe="")
                method = http.put if command == "add_replica" else http.delete
                answer = method(f"{path}/{node}")
    except httpx.HTTPError as error:
        print(f"sievemq streams {command}: cannot reach {base}: {error}", file=err)
        return 1
    if answer.status_code >= 300:
        print(f"sievemq streams {command}: {reason(answer)}", file=err)
        return 1
    where = f"stream '{names[0]}' in vhost '{vhost}'"
    if command == "stream_status":
        print_members(answer.json(), args.formatter, COLUMNS, out)
    elif command == "add_replica":
        done = "added a replica of" if answer.status_code == 201 else "already a member of"
        print(f"node '{names[1]}': {done} {where}", file=out)
    else:
        print(f"node '{names[1]}': its replica of {where} removed", file=out)
    return 0


def vhost_and_names(
    args: argparse.Namespace, command: str, queue: str, with_node: bool, err: TextIO
) -> tuple[str, list[str]] | None:
    """The vhost (given first, or as ``--vhost``; default /) and the queue's (and the
    node's) names; None after printing the usage when they do not fit."""
    wanted = 2 if with_node else 1
    names = list(args.names)
    vhost = args.vhost
    if len(names) == wanted + 1:
        if vhost is not None:
            print(f"sievemq {command}: give the vhost once", file=err)
            return None
        vhost = names.pop(0)
    if len(names) != wanted:
        usage = f"[VHOST] {queue}" + (" NODE" if with_node else "")
        print(f"usage: sievemq {command} {usage}", file=err)
        return None
    return ("/" if vhost is None else vhost), names


def split_url(url: str) -> tuple[str, httpx.BasicAuth | None]:
    """The URL without its credentials, and those as HTTP basic authentication."""
    parts = urlsplit(url)
    if parts.username is None:
        return url.rstrip("/"), None
    netloc = parts.netloc.rsplit("@", 1)[1]
    bare = urlunsplit(parts._replace(netloc=netloc)).rstrip("/")
    return bare, httpx.BasicAuth(parts.username, parts.password or "")


def reason(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("reason"):
        return f"{body['reason']} (HTTP {answer.status_code})"
    return f"HTTP {answer.status_code}"


def print_members(
    members: list[dict[str, Any]], formatter: str, columns: tuple[str, ...], out: TextIO
) -> None:
    """A status's members as a table of ``columns`` (null figures as ``-``) or as JSON."""
    if formatter == "json":
        print(json.dumps(members, indent=2), file=out)
        return
    rows = [columns] + [
        tuple(
            "-" if m.get(c) is None else str(m.get(c)).lower() if c == "online" else str(m[c])
            for c in columns
        )
        for m in members
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)
