"""`python -m bench [name ...] [-- args]`: run benchmarks, each printing JSON to stdout.

Each benchmark is its own module (`python -m bench.<name>`), run here in a fresh interpreter
so one benchmark's warm caches and garbage do not colour the next one. With no name, the
self-contained set runs; `vs_rabbitmq` needs the RabbitMQ peer and has its own make target.
"""

from __future__ import annotations

import subprocess
import sys

BENCHMARKS = ("storage_append", "storage_filter", "amqp_codec", "sql_eval", "sql_stream_eval")


def main() -> int:
    args = sys.argv[1:]
    extra: list[str] = []
    if "--" in args:
        extra = args[args.index("--") + 1 :]
        args = args[: args.index("--")]
    names = args or list(BENCHMARKS)
    status = 0
    for name in names:
        print(f"# bench.{name}", file=sys.stderr, flush=True)
        status |= subprocess.run([sys.executable, "-m", f"bench.{name}", *extra]).returncode
    return status


if __name__ == "__main__":
    raise SystemExit(main())
