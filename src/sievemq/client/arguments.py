"""The command lines of `sievemq publish` and `sievemq tail` (no aiormq import here: the
parser is built for every `sievemq` command)."""

from __future__ import annotations

import argparse
import os

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def add_server_option(
    parser: argparse.ArgumentParser, option: str, env: str, default: str, text: str
) -> None:
    """``option``: the server asked (``--uri``, ``--url``), by default ``$env``'s or
    ``default``; shared by every `sievemq` client command."""
    parser.add_argument(
        option,
        default=os.environ.get(env, default),
        help=f"{text} (default ${env} or {default})",
    )


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_option(
        parser,
        "--uri",
        "SIEVEMQ_URI",
        DEFAULT_URI,
        "the server, amqp://user:pass@host:port/vhost",
    )
    parser.add_argument("--stream", required=True, help="the stream's name")


def add_tail_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument("--filter", help="only messages with these filter values: v1,v2")
    parser.add_argument(
        "--match-unfiltered",
        action="store_true",
        help="with --filter, also messages published without a filter value",
    )
    parser.add_argument("--sql", help="only messages matching this SQL filter expression")
    parser.add_argument(
        "--from",
        dest="start",
        default="next",
        help="first | last | next (default) | an offset | an ISO time (UTC unless it says)",
    )
    parser.add_argument("--count", type=int, help="stop after this many messages")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--prefetch", type=int, default=500, help="credit (default 500)")


def add_publish_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument("--filter-value", help="the message's x-stream-filter-value")
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="K=V",
        help="a header (string value); may be repeated",
    )
    parser.add_argument(
        "--count", type=int, default=1, help="publish the body this many times (default 1)"
    )
    parser.add_argument(
        "body", nargs="?", help="the message body; without it, each line of stdin is one"
    )
