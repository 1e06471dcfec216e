"""What `sievemq streams` and `sievemq queues` share: a queue's members (a stream's replicas,
a quorum queue's members) added, removed and listed through a node's admin API, as RabbitMQ's
``rabbitmq-streams`` and ``rabbitmq-queues`` do. One line naming the problem and exit status
1 when the node refuses (an unknown queue or node, the leader's removal...)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import httpx

DEFAULT_URL = "http://guest:guest@127.0.0.1:15672"


@dataclass(frozen=True)
class Tool:
    """One `sievemq TOOL`'s member commands: ``send`` makes the request of ``command`` for
    a vhost, a queue and a node (None for the status)."""

    name: str  # "streams"
    queue: str  # how the usage names the queue: "STREAM"
    noun: str  # how the answers name it: "stream"
    member: str  # and a member: "replica"
    add: str  # the adding command
    status: str  # the listing command
    columns: tuple[str, ...]  # the listing's table
    commands: tuple[tuple[str, str, str], ...]  # each command, its arguments and help
    send: Callable[[httpx.Client, str, str, str, str | None], httpx.Response]


def run(tool: Tool, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one command; 0 done, 1 refused or unreachable, 2 bad arguments."""
    command = getattr(args, f"{tool.name}_command")
    status = command == tool.status
    named = vhost_and_names(args, f"{tool.name} {command}", tool.queue, not status, err)
    if named is None:
        return 2
    vhost, names = named
    node = None if status else names[1]
    prog = f"sievemq {tool.name} {command}"
    answer = ask(prog, args.url, lambda http: tool.send(http, command, vhost, names[0], node), err)
    if answer is None:
        return 1
    where = f"{tool.noun} '{names[0]}' in vhost '{vhost}'"
    if status:
        print_members(answer.json(), args.formatter, tool.columns, out)
    elif command == tool.add:
        done = f"added a {tool.member} of" if answer.status_code == 201 else "already a member of"
        print(f"node '{node}': {done} {where}", file=out)
    else:
        print(f"node '{node}': its {tool.member} of {where} removed", file=out)
    return 0


def add_commands(parser: argparse.ArgumentParser, tool: Tool) -> Any:
    """The subcommands of `sievemq TOOL` (``args.TOOL_command``), each taking names,
    ``--vhost`` and ``--url``; the status a ``--formatter`` too. The subparsers, for more."""
    subparsers = parser.add_subparsers(dest=f"{tool.name}_command", metavar="COMMAND")
    for command, args, text in tool.commands:
        usage = f"sievemq {tool.name} {command} {args}"
        sub = subparsers.add_parser(command, help=text, usage=usage)
        sub.add_argument("names", nargs="+", metavar="NAME", help=args)
        sub.add_argument("--vhost", default=None, help="the vhost (default /)")
        add_url(sub)
        if command == tool.status:
            sub.add_argument("--formatter", choices=("table", "json"), default="table")
    return subparsers


def add_url(parser: argparse.ArgumentParser) -> None:
    """``--url``: the admin API of the node asked."""
    parser.add_argument(
        "--url",
        default=os.environ.get("SIEVEMQ_ADMIN_URL", DEFAULT_URL),
        help="a node's admin API, http://user:pass@host:port (default $SIEVEMQ_ADMIN_URL "
        f"or {DEFAULT_URL})",
    )


def ask(
    prog: str,
    url: str,
    send: Callable[[httpx.Client], httpx.Response],
    err: TextIO,
    timeout: float = 30,
) -> httpx.Response | None:
    """The node's answer to ``send``'s request; None after printing why when it refused
    (its reason) or could not be reached."""
    base, auth = split_url(url)
    try:
        with httpx.Client(base_url=base, auth=auth, timeout=timeout) as http:
            answer = send(http)
    except httpx.HTTPError as error:
        print(f"{prog}: cannot reach {base}: {error}", file=err)
        return None
    if answer.status_code >= 300:
        print(f"{prog}: {reason(answer)}", file=err)
        return None
    return answer


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
