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
    commands = parser.add_subparsers(dest="streams_command", metavar="COMMAND")
    for command, args, text in (
        ("add_replica", "[VHOST] STREAM NODE", "add a replica of a stream on a node"),
        ("delete_replica", "[VHOST] STREAM NODE", "remove a node's replica of a stream"),
        ("stream_status", "[VHOST] STREAM", "each member of a stream, with its offsets"),
    ):
        sub = commands.add_parser(command, help=text, usage=f"sievemq streams {command} {args}")
        sub.add_argument("names", nargs="+", metavar="NAME", help=args)
        sub.add_argument("--vhost", default=None, help="the vhost (default /)")
        sub.add_argument(
            "--url",
            default=os.environ.get("SIEVEMQ_ADMIN_URL", DEFAULT_URL),
            help="a node's admin API, http://user:pass@host:port (default $SIEVEMQ_ADMIN_URL "
            f"or {DEFAULT_URL})",
        )
        if command == "stream_status":
            sub.add_argument("--formatter", choices=("table", "json"), default="table")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one command; 0 done, 1 refused or unreachable, 2 bad arguments."""
    command = args.streams_command
    wanted = 1 if command == "stream_status" else 2
    names = list(args.names)
    if len(names) == wanted + 1:
        if args.vhost is not None:
            print(f"sievemq streams {command}: give the vhost once", file=err)
            return 2
        args.vhost = names.pop(0)
    if len(names) != wanted:
        usage = "[VHOST] STREAM" + (" NODE" if wanted == 2 else "")
        print(f"usage: sievemq streams {command} {usage}", file=err)
        return 2
    vhost = "/" if args.vhost is None else args.vhost
    base, auth = _split(args.url)
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
        print(f"sievemq streams {command}: {_reason(answer)}", file=err)
        return 1
    where = f"stream '{names[0]}' in vhost '{vhost}'"
    if command == "stream_status":
        _status(answer.json(), args.formatter, out)
    elif command == "add_replica":
        done = "added a replica of" if answer.status_code == 201 else "already a member of"
        print(f"node '{names[1]}': {done} {where}", file=out)
    else:
        print(f"node '{names[1]}': its replica of {where} removed", file=out)
    return 0


def _split(url: str) -> tuple[str, httpx.BasicAuth | None]:
    """The URL without its credentials, and those as HTTP basic authentication."""
    parts = urlsplit(url)
    if parts.username is None:
        return url.rstrip("/"), None
    netloc = parts.netloc.rsplit("@", 1)[1]
    bare = urlunsplit(parts._replace(netloc=netloc)).rstrip("/")
    return bare, httpx.BasicAuth(parts.username, parts.password or "")


def _reason(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("reason"):
        return f"{body['reason']} (HTTP {answer.status_code})"
    return f"HTTP {answer.status_code}"


def _status(members: list[dict[str, Any]], formatter: str, out: TextIO) -> None:
    if formatter == "json":
        print(json.dumps(members, indent=2), file=out)
        return
    rows = [COLUMNS] + [
        tuple(
            "-" if m.get(c) is None else str(m.get(c)).lower() if c == "online" else str(m[c])
            for c in COLUMNS
        )
        for m in members
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)
