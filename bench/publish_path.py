"""CPU per published message through the server's real publish path, without a socket.

    python -m bench.publish_path [--n 100000] [--repeats 5] [--size 100] [--kinds identical,unique]
                                 [--baseline COMMIT] [--profile FILE]

Why beside ``bench/vs_rabbitmq.py``: there the server's CPU per message moves with the load
generator's speed on the same two cores (a faster client means more messages per socket
read and less cost per message), so a change of 5 % drowns in the noise of a shared machine.
Here the bytes a confirming publisher sends (``publish`` + content header + body frames,
pre-encoded once) are handed to the real ``AMQPProtocol.data_received`` in fixed slices of
``--batch`` messages, the event loop runs between slices (the appender writes each slice as
one chunk with durability ``batch``, confirms are written to a transport that counts bytes),
and the process CPU time of the publishing part is divided by the message count. The same
code path as a socket client's, with fixed batching: what changes is our code, nothing else.

Kinds: ``identical`` (one property list for every message, the memo caches' best case) and
``unique`` (loadgen's ``-unique-props -filter-values 50``: own message-id, timestamp,
content-type and ``seq`` header, plus one of 50 ``x-stream-filter-value``s).
``--baseline COMMIT`` runs the same measurement on ``git archive COMMIT src`` in a child
process, interleaved run by run, and prints both with the ratio. ``--profile FILE`` writes a
cProfile of one run of each kind (``FILE.identical``, ``FILE.unique``) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader

from bench._util import export_src, git_commit, in_process_node, profiled, shut_down

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "bench-publish-path"
FILTER_VALUES = 50  # as loadgen -filter-values 50
WARMUP = 5_000  # messages published before the timed part (fills the memo caches)


class CountingTransport:
    """The asyncio transport the protocol writes to: counts what it is sent."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, data: Any) -> None:
        self.written += sum(map(len, data))

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _frames(channel: int, *methods: Any) -> bytes:
    return b"".join(pframe.marshal(m, channel) for m in methods)


def handshake() -> bytes:
    """Protocol header through queue.declare of a stream with confirms on, as loadgen does."""
    return (
        b"AMQP\x00\x00\x09\x01"
        + _frames(
            0,
            spec.Connection.StartOk(
                client_properties={"product": "bench"},
                mechanism="PLAIN",
                response="\0guest\0guest",
            ),
            spec.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
            spec.Connection.Open(virtual_host="/"),
        )
        + _frames(
            1,
            spec.Channel.Open(),
            spec.Confirm.Select(),
            spec.Queue.Declare(queue=QUEUE, durable=True, arguments={"x-queue-type": "stream"}),
        )
    )


def message_bytes(i: int, size: int, unique: bool) -> bytes:
    """The three frames of publish ``i`` to the default exchange, as loadgen sends it."""
    if unique:
        props = spec.Basic.Properties(
            content_type="application/octet-stream",
            message_id=f"{i:x}-0",
            timestamp=datetime.datetime(2026, 1, 1) + datetime.timedelta(microseconds=i),
            headers={"seq": i, "x-stream-filter-value": f"v{i % FILTER_VALUES}"},
        )
    else:
        props = spec.Basic.Properties()
    body = i.to_bytes(16, "big") + b"x" * (size - 16)
    return (
        pframe.marshal(spec.Basic.Publish(exchange="", routing_key=QUEUE), 1)
        + pframe.marshal(pheader.ContentHeader(0, len(body), props), 1)
        + pframe.marshal(pbody.ContentBody(body), 1)
    )


def slices(n: int, size: int, unique: bool, batch: int) -> list[bytes]:
    """``n`` messages in slices of ``batch`` messages (what one socket read hands over)."""
    if unique:
        one = [message_bytes(i, size, True) for i in range(n)]
    else:
        one = [message_bytes(0, size, False)] * n
    return [b"".join(one[k : k + batch]) for k in range(0, n, batch)]


async def publish_run(
    n: int, size: int, unique: bool, batch: int, passes: int, profile: str | None
) -> dict[str, Any]:
    """One fresh server state, WARMUP messages, then ``passes`` times ``n`` timed: CPU µs
    per message of the best pass (noise on a shared machine only ever adds time)."""
    from sievemq.serve import protocol_factory

    data, broker, node = in_process_node("sievemq-publish-path-", "BATCH")
    protocol = protocol_factory(node)
    transport = CountingTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    warm = slices(WARMUP, size, unique, batch)
    timed = slices(n, size, unique, batch)
    try:
        protocol.data_received(handshake())
        for chunk in warm:
            protocol.data_received(chunk)
            await _handled(protocol)
        await asyncio.sleep(0.05)
        cpus = []
        with profiled(profile):
            for _ in range(passes):
                cpu = time.process_time()
                for chunk in timed:
                    protocol.data_received(chunk)
                    await _handled(protocol)  # the appender's flush and the confirms run here
                await asyncio.sleep(0)
                cpus.append((time.process_time() - cpu) / n * 1e6)
        stored = broker.vhost("/").get_queue(QUEUE).message_count
        if stored < WARMUP + n * passes:
            raise SystemExit(f"only {stored} of {WARMUP + n * passes} messages were stored")
        if transport.written == 0:
            raise SystemExit("no confirm was written")
        return {"cpu_us_per_msg": min(cpus), "passes": cpus}
    finally:
        shut_down(protocol, broker, node, data)


async def _handled(protocol: Any) -> None:
    """Let the loop run once, and on until the protocol reads again: a read handed over in
    slices (``net.protocol.READ_SLICE``) keeps reading paused until its last slice, as a
    socket's next bytes would wait."""
    await asyncio.sleep(0)
    while protocol.reading_paused:
        await asyncio.sleep(0)


def one_run(args: argparse.Namespace, kind: str, profile: str | None = None) -> dict[str, Any]:
    unique = kind == "unique"
    return asyncio.run(publish_run(args.n, args.size, unique, args.batch, args.passes, profile))


def child(args: argparse.Namespace, kind: str, src: Path) -> dict[str, Any]:
    """``one_run`` in a child process on the source tree ``src`` (the baseline)."""
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}")
    argv = [sys.executable, "-m", "bench.publish_path", "--child", kind]
    argv += ["--n", str(args.n), "--size", str(args.size), "--batch", str(args.batch)]
    argv += ["--passes", str(args.passes)]
    out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def tree_and_baseline(
    repeats: int,
    cases: dict[str, Callable[[Path], dict[str, Any]]],
    tree: Path,
    baseline: Path | None,
) -> dict[str, dict[str, list[float]]]:
    """Each case's run (a child process on a source tree) on ``tree``, then on ``baseline``
    when there is one, case after case, ``repeats`` times: each case's CPU µs/msg by tree
    ("sievemq", "baseline")."""
    runs: dict[str, dict[str, list[float]]] = {}
    for _ in range(repeats):
        for key, run in cases.items():
            runs.setdefault(key, {}).setdefault("sievemq", []).append(run(tree)["cpu_us_per_msg"])
            if baseline is not None:
                runs[key].setdefault("baseline", []).append(run(baseline)["cpu_us_per_msg"])
    return runs


def summarize_cpu_runs(runs: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Per case: median and least CPU µs/msg of "sievemq" (and "baseline", with the ratios)."""
    results: dict[str, Any] = {}
    for kind, by in runs.items():
        medians = {name: round(statistics.median(v), 2) for name, v in by.items()}
        # the least of the runs: on a shared machine noise only ever adds CPU time
        least = {name: round(min(v), 2) for name, v in by.items()}
        entry: dict[str, Any] = {"cpu_us_per_msg": medians, "min_cpu_us_per_msg": least}
        if "baseline" in medians:
            entry["ratio_over_baseline"] = round(medians["sievemq"] / medians["baseline"], 3)
            entry["min_ratio_over_baseline"] = round(least["sievemq"] / least["baseline"], 3)
        entry["runs"] = {name: [round(x, 2) for x in v] for name, v in by.items()}
        results[kind] = entry
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=250, help="messages per data_received")
    parser.add_argument("--passes", type=int, default=3, help="timed passes per process")
    parser.add_argument("--kinds", default="identical,unique")
    parser.add_argument("--baseline", metavar="COMMIT")
    parser.add_argument("--profile", metavar="FILE")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args, args.child)))
        return
    kinds = args.kinds.split(",")
    if args.profile:
        for kind in kinds:
            one_run(args, kind, f"{args.profile}.{kind}")
        return
    base_src: Path | None = None
    if args.baseline:
        base_src = Path(tempfile.mkdtemp(prefix="sievemq-publish-path-base-"))
        export_src(args.baseline, base_src)
    cases: dict[str, Callable[[Path], dict[str, Any]]] = {
        kind: functools.partial(child, args, kind) for kind in kinds
    }
    try:
        runs = tree_and_baseline(
            args.repeats, cases, ROOT / "src", None if base_src is None else base_src / "src"
        )
    finally:
        if base_src is not None:
            shutil.rmtree(base_src, ignore_errors=True)
    results = summarize_cpu_runs(runs)
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "commit": git_commit(),
                "baseline": args.baseline,
                "n": args.n,
                "size": args.size,
                "batch": args.batch,
                "load_average": os.getloadavg(),
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
