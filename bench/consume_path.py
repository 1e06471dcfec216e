"""CPU per consumed message through the server's real stream consume path, without a socket.

    python -m bench.consume_path [--n 100000] [--repeats 5] [--size 100] [--kinds identical,unique]
                                 [--baseline COMMIT] [--profile FILE]

The consume side of ``bench/publish_path.py``, for the same reason: through a socket the
server's CPU per message moves with the load generator's speed on the same cores, so a change
of 5 % drowns in the noise. Here a stream of ``--n`` messages is published once through the
real publish path (as ``bench.publish_path`` does: loadgen's frames handed to
``AMQPProtocol.data_received``), untimed. Then, per timed pass, a fresh connection does what
loadgen's consume does (``basic.qos`` prefetch 1000, ``basic.consume`` with
``x-stream-offset`` first, unfiltered, a multiple ``basic.ack`` every 500 deliveries) with its
bytes handed to ``data_received``; the server's deliveries go to a transport that counts
bytes. The process CPU time from the consume to the last delivery, divided by the messages:
the stream reader, decode, frame building, the joined write and the ack handling, the code
that changes, nothing else (the socket's kernel time is not in it).

Kinds: ``identical`` (one property list for every message) and ``unique`` (loadgen's
``-unique-props -filter-values 50``: own message-id, timestamp, content-type and ``seq``
header, plus one of 50 ``x-stream-filter-value``s). ``--baseline COMMIT`` runs the same
measurement on ``git archive COMMIT src`` in a child process, interleaved run by run, and
prints both with the ratio. ``--profile FILE`` writes a cProfile of one run of each kind
(``FILE.identical``, ``FILE.unique``) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pamqp import commands as spec

from bench._util import export_src, git_commit, in_process_node, profiled, shut_down
from bench.publish_path import (
    QUEUE,
    CountingTransport,
    _frames,
    _handled,
    handshake,
    opening,
    path_options,
    slices,
    summarize_cpu_runs,
    tree_and_baseline,
)

ROOT = Path(__file__).resolve().parents[1]
PREFETCH = 1000  # loadgen -prefetch 1000
ACK_EVERY = 500  # loadgen's default: prefetch / 2


def consume_handshake() -> bytes:
    """Through basic.consume from the first offset, as loadgen consumes."""
    consume = spec.Basic.Consume(
        queue=QUEUE, consumer_tag="bench", arguments={"x-stream-offset": "first"}
    )
    qos = spec.Basic.Qos(prefetch_count=PREFETCH)
    return opening() + _frames(1, spec.Channel.Open(), qos, consume)


def ack_frame(tag: int) -> bytes:
    return _frames(1, spec.Basic.Ack(delivery_tag=tag, multiple=True))


async def consume_run(
    n: int, size: int, unique: bool, passes: int, profile: str | None
) -> dict[str, Any]:
    """One fresh server state holding ``n`` messages, then ``passes`` consumes of all of them,
    timed: CPU µs per message of the best pass (noise on a shared machine only adds time)."""
    from sievemq.serve import protocol_factory

    data, broker, node = in_process_node("sievemq-consume-path-", "BATCH")
    publisher = protocol_factory(node)
    publisher.connection_made(CountingTransport())  # type: ignore[arg-type]
    acks = [ack_frame(tag) for tag in range(ACK_EVERY, n + 1, ACK_EVERY)]
    try:
        publisher.data_received(handshake())
        for chunk in slices(n, size, unique, 250):
            publisher.data_received(chunk)
            await _handled(publisher)
        queue = broker.vhost("/").get_queue(QUEUE)
        while queue.message_count < n:
            await asyncio.sleep(0.01)
        cpus = []
        with profiled(profile):
            for _ in range(passes):
                transport = CountingTransport()
                consumer = protocol_factory(node)
                consumer.connection_made(transport)  # type: ignore[arg-type]
                cpu = time.process_time()
                consumer.data_received(consume_handshake())
                (stream_consumer,) = queue.consumers
                acked = 0
                while stream_consumer.delivered < n:
                    await asyncio.sleep(0)
                    due = stream_consumer.delivered // ACK_EVERY
                    while acked < due:
                        consumer.data_received(acks[acked])
                        acked += 1
                cpus.append((time.process_time() - cpu) / n * 1e6)
                consumer.connection_lost(None)
                await asyncio.sleep(0)
                if transport.written < n * size:
                    raise SystemExit(f"only {transport.written} bytes were delivered")
        return {"cpu_us_per_msg": min(cpus), "passes": cpus}
    finally:
        shut_down(publisher, broker, node, data)


def one_run(args: argparse.Namespace, kind: str, profile: str | None = None) -> dict[str, Any]:
    unique = kind == "unique"
    return asyncio.run(consume_run(args.n, args.size, unique, args.passes, profile))


def child(args: argparse.Namespace, kind: str, src: Path) -> dict[str, Any]:
    """``one_run`` in a child process on the source tree ``src``."""
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}")
    argv = [sys.executable, "-m", "bench.consume_path", "--child", kind, "--n", str(args.n)]
    argv += ["--size", str(args.size), "--passes", str(args.passes)]
    out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> None:
    args = path_options(__doc__).parse_args()
    if args.child:
        print(json.dumps(one_run(args, args.child)))
        return
    if args.profile:
        for kind in args.kinds.split(","):
            one_run(args, kind, f"{args.profile}.{kind}")
        return
    cases: dict[str, Callable[[Path], dict[str, Any]]] = {
        kind: functools.partial(child, args, kind) for kind in args.kinds.split(",")
    }
    base = Path(tempfile.mkdtemp(prefix="sievemq-consume-path-base-"))
    try:
        base_src = export_src(args.baseline, base) if args.baseline else None
        runs = tree_and_baseline(args.repeats, cases, ROOT / "src", base_src)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    figures = {"n": args.n, "size": args.size, "prefetch": PREFETCH, "ack_every": ACK_EVERY}
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "commit": git_commit(),
                "baseline": args.baseline,
                **figures,
                "load_average": os.getloadavg(),
                "results": summarize_cpu_runs(runs),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
