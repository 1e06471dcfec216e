"""CPU per message of the stream protocol's publish path, without a socket.

    python -m bench.stream_publish_path [--n 100000] [--repeats 5] [--sizes 100,1024]
                                        [--kinds anonymous,named] [--baseline COMMIT]
                                        [--new COMMIT] [--profile FILE]

The bytes an rstream publisher sends (Publish v1 frames of 100 messages each, pre-encoded
once) are handed to the real ``StreamProtocol.data_received`` in 256 KiB slices cut without
regard to frame boundaries (asyncio's socket read size), the event loop runs between slices
(the stream's appender writes one chunk per tick, durability ``never`` like the
``--compare`` run; PublishConfirm frames go to a transport that counts bytes), and the
process CPU time of the timed part is divided by the message count: the server's own cost,
free of the client's speed and of the scheduling noise of a shared machine.

Kinds: ``anonymous`` (DeclarePublisher without a reference, what rstream's Producer does)
and ``named`` (a publisher reference: the deduplication path, a publisher tag per record).
``--baseline COMMIT`` runs the same measurement on ``git archive COMMIT src`` in a child
process, interleaved run by run with this tree (or with ``--new COMMIT``'s, to measure one
step of several), and prints both with the ratio.
``--profile FILE`` writes a cProfile of one run per kind and size (``FILE.<kind>.<size>``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import publish_path
from bench._util import export_src, git_commit, in_process_node, profiled, shut_down
from bench.publish_path import summarize_cpu_runs, tree_and_baseline

ROOT = Path(__file__).resolve().parents[1]
STREAM = "bench-stream-publish-path"
BATCH = 100  # messages per Publish frame, as the rstream bench sends them
READ = 256 * 1024  # bytes per data_received (asyncio's socket read size)
WARMUP = 5_000


class CountingTransport(publish_path.CountingTransport):
    """publish_path's counting transport that also keeps the first frames it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if len(self.frames) < 64:
            self.frames.append(data)

    def get_write_buffer_size(self) -> int:
        return 0


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def _frame(key: int, body: bytes, version: int = 1) -> bytes:
    return struct.pack(">IHH", len(body) + 4, key, version) + body


def handshake() -> list[bytes]:
    """PeerProperties, SASL PLAIN, Tune echo, Open: each handed over on its own."""
    plain = b"\0guest\0guest"
    return [
        _frame(17, struct.pack(">II", 1, 0)),
        _frame(18, struct.pack(">I", 2)),
        _frame(19, struct.pack(">I", 3) + _s("PLAIN") + struct.pack(">I", len(plain)) + plain),
        _frame(20, struct.pack(">II", 1048576, 0)),
        _frame(21, struct.pack(">I", 4) + _s("/")),
    ]


def publish_bytes(first_id: int, n: int, size: int) -> bytes:
    """``n`` messages from publishing id ``first_id`` as Publish v1 frames of BATCH."""
    out = []
    body = b"x" * size
    entry_len = struct.pack(">i", size) + body
    pid = first_id
    for k in range(0, n, BATCH):
        count = min(BATCH, n - k)
        parts = [struct.pack(">Bi", 1, count)]
        for _ in range(count):
            parts.append(struct.pack(">Q", pid))
            parts.append(entry_len)
            pid += 1
        out.append(_frame(2, b"".join(parts)))
    return b"".join(out)


def slices(data: bytes) -> list[bytes]:
    return [data[k : k + READ] for k in range(0, len(data), READ)]


async def publish_run(
    n: int, size: int, named: bool, passes: int, profile: str | None
) -> dict[str, Any]:
    """One fresh server state, WARMUP messages, then ``passes`` times ``n`` timed: CPU µs
    per message of the best pass (noise on a shared machine only ever adds time)."""
    from sievemq.gateway.net.stream_protocol import StreamProtocol
    from sievemq.gateway.streamproto_session.connection import StreamConnection
    from sievemq.gateway.streamproto_session.node import StreamNode

    data, broker, node = in_process_node("sievemq-stream-publish-path-", "NEVER")
    snode = StreamNode(node, "127.0.0.1", 1048576, 0)
    conn = StreamConnection(snode)
    protocol = StreamProtocol(conn, 1048576, 64 * 1024 * 1024)
    transport = CountingTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    try:
        for frame in handshake():
            protocol.data_received(frame)
            await asyncio.sleep(0)
        create = _frame(13, struct.pack(">I", 5) + _s(STREAM) + struct.pack(">i", 0))
        protocol.data_received(create)
        for _ in range(1000):  # the definitions change answers after its fdatasync
            await asyncio.sleep(0.002)
            if broker.vhost("/").get_queue(STREAM) is not None:
                break
        await asyncio.sleep(0.05)
        reference = "bench-ref" if named else ""
        declare = struct.pack(">IB", 6, 1) + _s(reference) + _s(STREAM)
        protocol.data_received(_frame(1, declare))
        await asyncio.sleep(0.01)
        next_id = 1
        for chunk in slices(publish_bytes(next_id, WARMUP, size)):
            protocol.data_received(chunk)
            await asyncio.sleep(0)
        next_id += WARMUP
        timed = []
        for _ in range(passes):
            timed.append(slices(publish_bytes(next_id, n, size)))
            next_id += n
        await asyncio.sleep(0.05)
        cpus = []
        with profiled(profile):
            for one in timed:
                cpu = time.process_time()
                for chunk in one:
                    protocol.data_received(chunk)
                    await asyncio.sleep(0)  # the appender's flush and the confirms run here
                await asyncio.sleep(0)
                cpus.append((time.process_time() - cpu) / n * 1e6)
        await asyncio.sleep(0.01)
        stored = broker.vhost("/").get_queue(STREAM).stream.end_offset
        if stored < WARMUP + n * passes:
            raise SystemExit(f"only {stored} of {WARMUP + n * passes} messages were stored")
        if conn.publish_credits != 50_000:
            raise SystemExit(f"{50_000 - conn.publish_credits} messages were not confirmed")
        return {"cpu_us_per_msg": min(cpus), "passes": cpus}
    finally:
        shut_down(protocol, broker, node, data)


def one_run(args: argparse.Namespace, kind: str, size: int, profile: str | None = None) -> Any:
    return asyncio.run(publish_run(args.n, size, kind == "named", args.passes, profile))


def child(args: argparse.Namespace, kind: str, size: int, src: Path) -> dict[str, Any]:
    """``one_run`` in a child process on the source tree ``src``."""
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}")
    argv = [sys.executable, "-m", "bench.stream_publish_path", "--child", kind]
    argv += ["--n", str(args.n), "--sizes", str(size), "--passes", str(args.passes)]
    out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _archive(commit: str) -> Path:
    """``git archive COMMIT src`` unpacked in a temporary folder."""
    tree = Path(tempfile.mkdtemp(prefix="sievemq-stream-publish-path-src-"))
    export_src(commit, tree)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--passes", type=int, default=3, help="timed passes per process")
    parser.add_argument("--kinds", default="anonymous,named")
    parser.add_argument("--baseline", metavar="COMMIT")
    parser.add_argument("--new", metavar="COMMIT", help="measure this commit, not the tree")
    parser.add_argument("--profile", metavar="FILE")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        print(json.dumps(one_run(args, args.child, sizes[0])))
        return
    kinds = args.kinds.split(",")
    if args.profile:
        for kind in kinds:
            for size in sizes:
                one_run(args, kind, size, f"{args.profile}.{kind}.{size}")
        return
    base_src = _archive(args.baseline) if args.baseline else None
    new_src = _archive(args.new) if args.new else ROOT
    cases: dict[str, Callable[[Path], dict[str, Any]]] = {
        f"{kind}_{size}B": functools.partial(child, args, kind, size)
        for kind in kinds
        for size in sizes
    }
    try:
        runs = tree_and_baseline(
            args.repeats, cases, new_src / "src", None if base_src is None else base_src / "src"
        )
    finally:
        for tree in (base_src, new_src if args.new else None):
            if tree is not None:
                shutil.rmtree(tree, ignore_errors=True)
    results = summarize_cpu_runs(runs)
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "commit": git_commit(),
                "baseline": args.baseline,
                "new": args.new,
                "n": args.n,
                "load_average": os.getloadavg(),
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
