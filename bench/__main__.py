"""Dispatch `python -m bench <name> [args]` to `bench.<name>.main`."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = ("storage_append", "storage_filter")


def main() -> int:
    args = sys.argv[1:]
    names = [args.pop(0)] if args and not args[0].startswith("-") else list(BENCHMARKS)
    status = 0
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        status |= module.main(args)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
