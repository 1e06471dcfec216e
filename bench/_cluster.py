"""Shared bits of the cluster benchmarks: a real etcd and real nodes on this machine, and the
stream clients several of them drive (declare, pipelined confirmed publishes, /api/queues)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiormq
import httpx

from bench._util import report
from sievemq.cluster.replication import replica_directory
from sievemq.storage import layout
from sievemq.storage.layout import stream_directory
from sievemq.storage.queue_log import Snapshot, decode_record
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import running_etcd

WINDOW = 1000  # confirms in flight per publisher
FILTERS = 50  # filter values the publishes cycle through


def node_args(etcd_url: str, name: str, *flags: str) -> tuple[str, ...]:
    """A cluster node's command line: its name, the etcd, an ephemeral cluster port."""
    return ("--node-name", name, "--cluster-etcd", etcd_url, "--cluster-port", "0", *flags)


@contextmanager
def running_cluster(
    prefix: str, names: Iterable[str] = ("a", "b", "c"), flags: tuple[str, ...] = ()
) -> Iterator[dict[str, ServerProcess]]:
    """An etcd and one started node per name (each with ``flags``) in a temporary
    directory; every node still running is stopped on the way out."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        base = Path(tmp)
        with (
            running_etcd(base / "etcd") as etcd,
            started_nodes(base, etcd.url, names, flags) as nodes,
        ):
            yield nodes


@contextmanager
def started_nodes(
    base: Path,
    etcd_url: str,
    names: Iterable[str],
    flags: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Iterator[dict[str, ServerProcess]]:
    """One node per name joined through ``etcd_url`` (data in ``base / NAME``, each with
    ``flags`` and the environment variables ``env``), started in turn; every node still
    running is stopped on the way out."""
    nodes = {
        n: ServerProcess(base / n, node_args(etcd_url, n, *flags), env=dict(env or {}))
        for n in names
    }
    try:
        for proc in nodes.values():
            proc.start()
        yield nodes
    finally:
        for proc in nodes.values():
            if proc.running:
                proc.stop()


def bench_options(doc: str | None, n: int, n_help: str | None = None) -> argparse.ArgumentParser:
    """The options every cluster bench takes (its docstring's first line as description):
    ``--n`` messages (default ``n``), ``--rounds`` (3), ``--out FILE.json``; the bench adds
    its own."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=n, help=n_help)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    return parser


Figures = dict[str, float]


def interleaved(
    rounds: int, sizes: dict[str, int], run: Callable[[str, int], Figures]
) -> dict[str, list[Figures]]:
    """``run(queue, size)`` for each case (its name -> a member count) once per round, the
    cases in turn, each on a queue of its own (``CASE-ROUND``): each case's figures by round."""
    runs: dict[str, list[Figures]] = {case: [] for case in sizes}
    for r in range(rounds):
        for case, size in sizes.items():
            runs[case].append(run(f"{case}-{r}", size))
    return runs


def median_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over ``runs`` (rounds of one case; nested dicts likewise)."""
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = median_figures([run[key] for run in runs])
        else:
            out[key] = statistics.median(run[key] for run in runs)
    return out


def report_rounds(
    bench: str,
    opts: argparse.Namespace,
    runs: dict[str, list[Figures]] | list[dict[str, Any]],
    **fields: Any,
) -> None:
    """``report`` of a bench's rounds (each case's, or of one case): ``fields``, ``--n`` and
    ``--rounds``, the medians over the rounds, then every round's figures."""
    if isinstance(runs, list):
        middle = median_figures(runs)
    else:
        middle = {case: median_figures(rs) for case, rs in runs.items()}
    report(bench, opts.out, **fields, n=opts.n, rounds=opts.rounds, medians=middle, runs=runs)


def wait_for(
    check: Callable[[], bool],
    what: str = "replicas did not catch up",
    timeout: float = 600.0,
    every: float = 0.02,
) -> None:
    """Poll ``check`` every ``every`` seconds until it holds; TimeoutError(``what``) after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(every)


def segment_sizes(directory: Path) -> dict[str, int]:
    """A stream directory's segment files and their sizes ({} when there is none)."""
    if not directory.is_dir():
        return {}
    return {p.name: p.stat().st_size for p in directory.glob("*.segment")}


def caught_up(leader: ServerProcess, replica: ServerProcess, name: str) -> bool:
    """Whether ``replica``'s copy of stream ``name`` (vhost /) equals ``leader``'s files."""
    mine = segment_sizes(replica_directory(replica.data_dir, "/", name))
    return bool(mine) and mine == segment_sizes(stream_directory(leader.data_dir, "/", name))


def live_ids(node: ServerProcess, name: str) -> set[int] | None:
    """The live log ids of quorum queue ``name`` (vhost /) in ``node``'s files (its own queue
    or its replica's copy: the same directory); None when unreadable now (being written)."""
    directory = layout.queue_directory(node.data_dir, "/", name)
    if not directory.is_dir():
        return None
    snapshot = Snapshot(directory, 0, 1 << 62)
    try:
        snapshot.open()
        ids: set[int] = set()
        for first in snapshot.firsts:
            for record in snapshot.segment(first)[1]:
                message = decode_record(record)
                if message is None:
                    return None
                ids.add(message.id)
    except (OSError, ValueError):
        return None
    return ids


def quorum_caught_up(leader: ServerProcess, replica: ServerProcess, name: str) -> bool:
    """Whether ``replica``'s copy of quorum queue ``name`` holds the leader's live ids."""
    mine = live_ids(replica, name)
    return mine is not None and mine == live_ids(leader, name)


async def publish_confirmed(
    node: ServerProcess, name: str, n: int, mode: int | None = None
) -> None:
    """``n`` messages of 100 B, one of ``FILTERS`` filter values each, with confirms,
    pipelined in windows of ``WINDOW`` (aiormq); ``mode``: their delivery-mode (2 for a
    quorum queue: only persistent messages are logged, and replicated)."""
    connection = await aiormq.connect(node.url)
    try:
        ch = await connection.channel(publisher_confirms=True)
        body = b"x" * 100
        for start in range(0, n, WINDOW):
            confirms = [
                asyncio.ensure_future(
                    ch.basic_publish(
                        body,
                        routing_key=name,
                        properties=aiormq.spec.Basic.Properties(
                            headers={"x-stream-filter-value": f"f{i % FILTERS}"},
                            delivery_mode=mode,
                        ),
                    )
                )
                for i in range(start, min(start + WINDOW, n))
            ]
            await asyncio.gather(*confirms)
    finally:
        await connection.close()


async def declare_stream(node: ServerProcess, name: str, size: int, kind: str = "stream") -> None:
    """A stream (or a quorum queue: ``kind``) with ``size`` members, declared on ``node``."""
    connection = await aiormq.connect(node.url)
    try:
        ch = await connection.channel()
        arguments: dict[str, Any] = {"x-queue-type": kind, "x-initial-cluster-size": size}
        if kind == "quorum":
            arguments = {"x-queue-type": kind, "x-quorum-initial-group-size": size}
        await ch.queue_declare(name, durable=True, arguments=arguments)
    finally:
        await connection.close()


def declared(node: ServerProcess, name: str, size: int, kind: str = "stream") -> None:
    """``declare_stream`` on ``node``, then wait until its ``size`` members are online."""
    asyncio.run(declare_stream(node, name, size, kind))
    wait_for(lambda: members_online(node, name, size))


def members_online(node: ServerProcess, name: str, count: int) -> bool:
    """Whether ``node``'s /api/queues shows ``count`` members of the stream online."""
    rows = httpx.get(node.admin_url + "/api/queues", auth=("guest", "guest"), timeout=10).json()
    return any(q["name"] == name and len(q.get("online", [])) == count for q in rows)
