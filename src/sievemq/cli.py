"""The `sievemq` command line: wiring only, each command lives in its own component."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from collections.abc import Sequence


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sievemq", description="AMQP 0-9-1 gateway for filtered stream queues."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    from sievemq.settings import add_serve_arguments

    serve = commands.add_parser("serve", help="run the AMQP listener and the admin API")
    add_serve_arguments(serve)
    serve.set_defaults(subparser=serve)

    streams = commands.add_parser(
        "streams",
        help="list the streams of a data directory; add_replica, delete_replica, stream_status",
    )
    streams.add_argument(
        "--data-dir", default=None, help="data directory (default $SIEVEMQ_DATA_DIR or ./data)"
    )
    from sievemq.client.replicas import add_arguments as add_replica_arguments

    add_replica_arguments(streams)

    queues = commands.add_parser(
        "queues", help="a quorum queue's members: add_member, delete_member, quorum_status"
    )
    from sievemq.client.quorum_members import add_arguments as add_member_arguments

    add_member_arguments(queues)

    export = commands.add_parser(
        "export", help="write a stream (or a filtered slice) to Parquet or JSON with Spark"
    )
    from sievemq.spark.export import add_arguments  # no pyspark import until it runs

    add_arguments(export)

    from sievemq.client.arguments import add_publish_arguments, add_tail_arguments

    publisher = commands.add_parser(
        "publish", help="publish to a stream with confirms (a body, or stdin lines)"
    )
    add_publish_arguments(publisher)
    tailer = commands.add_parser(
        "tail", help="print a stream's messages as they arrive (filters, offsets)"
    )
    add_tail_arguments(tailer)

    cluster = commands.add_parser("cluster", help="run a cluster of nodes through etcd")
    cluster_commands = cluster.add_subparsers(dest="cluster_command", required=True)
    up = cluster_commands.add_parser(
        "up", help="start an etcd and N nodes on this machine; Ctrl-C stops them all"
    )
    _add_cluster_up_arguments(up)

    storage = commands.add_parser("storage", help="inspect stream files on disk")
    storage_commands = storage.add_subparsers(dest="storage_command", required=True)
    verify = storage_commands.add_parser("verify", help="check every chunk's CRC and the index")
    verify.add_argument("path", help="a stream directory")
    dump = storage_commands.add_parser("dump", help="list the chunks of a stream")
    dump.add_argument("path", help="a stream directory")
    dump.add_argument("--records", action="store_true", help="list every record too")
    return parser


def _add_cluster_up_arguments(parser: argparse.ArgumentParser) -> None:
    """`sievemq cluster up`'s flags, here so that parsing imports nothing of the cluster."""
    parser.add_argument(
        "--nodes", type=int, default=os.cpu_count() or 1, help="how many nodes (default: cores)"
    )
    parser.add_argument(
        "--data-dir", type=pathlib.Path, required=True, help="one folder for it all"
    )
    parser.add_argument(
        "--etcd", default=None, help="use this etcd (URL[,URL...]) instead of starting one"
    )
    parser.add_argument(
        "--etcd-port",
        type=int,
        default=2379,
        help="etcd's client port (default 2379; 0: a free one)",
    )
    ports = (
        ("amqp", 5672),
        ("stream", 5552),
        ("admin", 15672),
        ("cluster", 25672),
    )
    for name, base in ports:
        parser.add_argument(
            f"--{name}-port",
            type=int,
            default=base,
            help=f"node i takes this port + i (default {base}; 0: free ports)",
        )
    parser.add_argument("--cluster-lease-ttl", type=int, default=5, help="seconds (default 5)")
    parser.add_argument(
        "--shared-ports",
        action="store_true",
        help="every node listens on the same AMQP and HTTP ports (SO_REUSEPORT: the kernel "
        "spreads connections over the nodes); Stream-protocol and cluster ports stay per node",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run one command; returns the exit status."""
    try:
        return _run(_build_parser().parse_args(argv))
    except BrokenPipeError:  # `sievemq storage dump ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _serve(args: argparse.Namespace) -> int:
    """Check the TLS files, bind every port, and only then import and start the server
    (the admin app's imports and the data directory's recovery take seconds): bad TLS
    files exit 2 and a port in use exits 1 at once."""
    from pydantic import ValidationError

    from sievemq.gateway.net.listener import bind_listeners, listen_tcp
    from sievemq.gateway.net.tls import TLSConfigError, server_ssl_context
    from sievemq.settings import settings_error, settings_from_args

    parser: argparse.ArgumentParser = args.subparser
    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        parser.error(settings_error(exc))  # exits 2, like any bad flag
    ssl_context = None
    tls = settings.tls_cert is not None and settings.tls_key is not None
    try:
        if settings.tls_cert is not None and settings.tls_key is not None:
            ssl_context = server_ssl_context(settings.tls_cert, settings.tls_key)
    except TLSConfigError as exc:
        print(f"sievemq serve: error: {exc}", file=sys.stderr)
        return 2
    try:
        bound = bind_listeners(
            settings.amqp_host,
            settings.amqp_port,
            settings.stream_port,
            settings.admin_host,
            settings.admin_port,
            (settings.amqps_port, settings.stream_tls_port) if tls else None,
            reuse_port=settings.reuse_port,
        )
        if settings.cluster_etcd is not None:
            try:
                bound.cluster = listen_tcp(settings.amqp_host, settings.cluster_port)
            except OSError:
                bound.close()
                raise
    except OSError as error:  # a port in use, an address not on this host
        print(f"sievemq serve: cannot listen: {error}", file=sys.stderr)
        return 1
    from sievemq.serve import serve

    return serve(settings, ssl_context, bound)


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return _serve(args)
    if args.command == "streams" and args.streams_command is not None:
        from sievemq.client.replicas import run

        return run(args, out=sys.stdout, err=sys.stderr)
    if args.command == "queues":
        if args.queues_command is None:
            usage = "usage: sievemq queues add_member|delete_member|quorum_status ..."
            print(usage, file=sys.stderr)
            return 2
        from sievemq.client.quorum_members import run as run_queues

        return run_queues(args, out=sys.stdout, err=sys.stderr)
    if args.command == "streams":
        from sievemq.streams_listing import list_streams

        return list_streams(args.data_dir, out=sys.stdout, err=sys.stderr)
    if args.command == "export":
        from sievemq.spark.export import run_export

        return run_export(args, out=sys.stdout, err=sys.stderr)
    if args.command == "publish":
        from sievemq.client.publish import run_publish

        return run_publish(args)
    if args.command == "tail":
        from sievemq.client.tail import run_tail

        return run_tail(args)
    if args.command == "cluster":
        from sievemq.cluster.local import run_up

        return run_up(args)
    if args.command == "storage":
        from sievemq.storage.tools import dump, verify

        if args.storage_command == "verify":
            return verify(args.path, out=sys.stdout)
        return dump(args.path, out=sys.stdout, records=args.records)
    return 2
