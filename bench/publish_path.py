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
import contextlib
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader

from bench._util import export_src, git_commit

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


def opening() -> bytes:
    """Protocol header through connection.open (PLAIN guest, frame_max 131072, no heartbeat)."""
    return b"AMQP\x00\x00\x09\x01" + _frames(
        0,
        spec.Connection.StartOk(
            client_properties={"product": "bench"},
            mechanism="PLAIN",
            response="\0guest\0guest",
        ),
        spec.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
        spec.Connection.Open(virtual_host="/"),
    )


def handshake() -> bytes:
    """Through queue.declare of a stream with confirms on, as loadgen does."""
    return opening() + _frames(
        1,
        spec.Channel.Open(),
        spec.Confirm.Select(),
        spec.Queue.Declare(queue=QUEUE, durable=True, arguments={"x-queue-type": "stream"}),
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


@contextlib.contextmanager
def profiled(path: str | None) -> Iterator[None]:
    """A cProfile of the block written to ``path`` (nothing without one)."""
    if not path:
        yield
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(path)


@contextlib.asynccontextmanager
async def in_process_node() -> AsyncIterator[tuple[Any, Callable[[CountingTransport], Any]]]:
    """A fresh broker (durability ``batch``) and node on this loop, in a temporary data
    directory: yields the broker and ``connect(transport)``, which opens an AMQP connection
    on the real protocol (closed, with the broker, on the way out)."""
    from sievemq.gateway.model.broker import Broker, BrokerSettings
    from sievemq.gateway.runtime.node import Limits, Node
    from sievemq.serve import protocol_factory
    from sievemq.storage import Durability

    data = Path(tempfile.mkdtemp(prefix="sievemq-cpu-path-"))
    broker = Broker(data, BrokerSettings(durability=Durability.BATCH))
    node = Node(broker, Limits(), asyncio.get_running_loop())
    opened: list[Any] = []

    def connect(transport: CountingTransport) -> Any:
        protocol = protocol_factory(node)
        protocol.connection_made(transport)  # type: ignore[arg-type]
        opened.append(protocol)
        return protocol

    try:
        yield broker, connect
    finally:
        for protocol in opened:
            protocol.connection_lost(None)  # a second time does nothing
        for vhost in broker.vhosts.values():
            vhost.close()
        node.executor.shutdown(wait=True)
        shutil.rmtree(data, ignore_errors=True)


async def publish_run(
    n: int, size: int, unique: bool, batch: int, passes: int, profile: str | None
) -> dict[str, Any]:
    """One fresh server state, WARMUP messages, then ``passes`` times ``n`` timed: CPU µs
    per message of the best pass (noise on a shared machine only ever adds time)."""
    async with in_process_node() as (broker, connect):
        transport = CountingTransport()
        protocol = connect(transport)
        warm = slices(WARMUP, size, unique, batch)
        timed = slices(n, size, unique, batch)
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


def child(module: str, kind: str, src: Path, argv: list[str]) -> dict[str, Any]:
    """``python -m module --child kind *argv`` on the source tree ``src`` (this one or the
    baseline's): one process's measurement, its JSON."""
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}")
    command = [sys.executable, "-m", module, "--child", kind, *argv]
    out = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def interleaved_cpu_runs(
    module: str, kinds: list[str], repeats: int, baseline: str | None, argv: list[str]
) -> dict[str, Any]:
    """``repeats`` rounds of one ``child`` per kind on this tree and, with ``baseline``, one
    on ``git archive baseline src`` right after it; summarized by ``summarize_cpu_runs``."""
    base_src: Path | None = None
    if baseline:
        base_src = Path(tempfile.mkdtemp(prefix="sievemq-cpu-path-base-"))
        export_src(baseline, base_src)
    runs: dict[str, dict[str, list[float]]] = {}
    try:
        for _ in range(repeats):
            for kind in kinds:
                got = child(module, kind, ROOT / "src", argv)
                runs.setdefault(kind, {}).setdefault("sievemq", []).append(got["cpu_us_per_msg"])
                if base_src is not None:
                    got = child(module, kind, base_src / "src", argv)
                    runs[kind].setdefault("baseline", []).append(got["cpu_us_per_msg"])
    finally:
        if base_src is not None:
            shutil.rmtree(base_src, ignore_errors=True)
    return summarize_cpu_runs(runs)


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


def cpu_path_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every in-process CPU-path benchmark takes (this one and
    ``bench.consume_path``)."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--passes", type=int, default=3, help="timed passes per process")
    parser.add_argument("--kinds", default="identical,unique")
    parser.add_argument("--baseline", metavar="COMMIT")
    parser.add_argument("--profile", metavar="FILE")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


def cpu_path_main(
    args: argparse.Namespace,
    module: str,
    run: Callable[[argparse.Namespace, str, str | None], dict[str, Any]],
    argv: list[str],
    **fields: Any,
) -> None:
    """A CPU-path benchmark's main: one ``run`` as the child, the profiles with
    ``--profile``, else the interleaved runs (``argv``: the child's options) as JSON."""
    if args.child:
        print(json.dumps(run(args, args.child, None)))
        return
    kinds = args.kinds.split(",")
    if args.profile:
        for kind in kinds:
            run(args, kind, f"{args.profile}.{kind}")
        return
    argv = ["--n", str(args.n), "--size", str(args.size), "--passes", str(args.passes), *argv]
    results = interleaved_cpu_runs(module, kinds, args.repeats, args.baseline, argv)
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "commit": git_commit(),
                "baseline": args.baseline,
                "n": args.n,
                "size": args.size,
                **fields,
                "load_average": os.getloadavg(),
                "results": results,
            },
            indent=2,
        )
    )


def main() -> None:
    parser = cpu_path_parser(__doc__)
    parser.add_argument("--batch", type=int, default=250, help="messages per data_received")
    args = parser.parse_args()
    argv = ["--batch", str(args.batch)]
    cpu_path_main(args, "bench.publish_path", one_run, argv, batch=args.batch)


if __name__ == "__main__":
    main()
