"""Server CPU per message of consuming a classic queue with manual acks: two SieveMQ trees in
one run (a baseline commit beside the working tree), interleaved, so the machine's load hits
both alike.

Per round and tree: declare a durable classic queue, publish N persistent messages with
confirms (Go loadgen, window 1000), then consume them with manual acks (prefetch 1000, ack
multiple every 500) by one or more consumers; the server's CPU time (utime + stime from
/proc) over the consume phase divided by the messages. Prints one JSON document with the
medians, every round and the head/base ratio (below 1: the head spends less).

    python -m bench.classic_consume_cpu --base COMMIT [--n 20000] [--size 100] \
        [--consumers 1] [--rounds 3]

``--base`` is exported with ``git archive`` (its ``src``) into a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import kit
from bench._util import export_src, git_commit, machine, start_server, stop_server
from bench.classic_work_queue import consume_many, declare, delete, publish

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", required=True, help="baseline commit")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kit.loadgen()
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
    with tempfile.TemporaryDirectory(prefix="sievemq-cpu-") as tmp, ExitStack() as stack:
        base_src = export_src(args.base, Path(tmp) / "base")
        servers = {
            "base": start_server(Path(tmp) / "data-base", "batch", base_src),
            "head": start_server(Path(tmp) / "data-head", "batch", REPO / "src"),
        }
        for server in servers.values():
            stack.callback(stop_server, server)
        for i in range(args.rounds):
            for name in ("base", "head") if i % 2 == 0 else ("head", "base"):
                server = servers[name]
                pid = server.process.pid
                declare(server.port, "bench-consume-cpu")
                publish(server.port, pid, "bench-consume-cpu", args.n, args.size)
                time.sleep(0.3)
                got = consume_many(server.port, pid, "bench-consume-cpu", args.n, args.consumers)
                delete(server.port, "bench-consume-cpu")
                runs[name].append(
                    {
                        "server_cpu_us_per_msg": got.get("server_cpu_us_per_msg"),
                        "cons_msgs_per_s": got.get("cons_msgs_per_s"),
                        "consumed": got.get("consumed"),
                        "load_average": round(os.getloadavg()[0], 2),
                    }
                )
                print(name, json.dumps(runs[name][-1]), file=sys.stderr, flush=True)
    medians = {
        name: statistics.median(r["server_cpu_us_per_msg"] for r in rounds)
        for name, rounds in runs.items()
    }
    print(
        json.dumps(
            {
                "bench": "classic_consume_cpu",
                "base": args.base,
                "head": git_commit(),
                "n": args.n,
                "size": args.size,
                "consumers": args.consumers,
                "machine": machine(),
                "median_server_cpu_us_per_msg": medians,
                "ratio_head_over_base": round(medians["head"] / medians["base"], 3),
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
