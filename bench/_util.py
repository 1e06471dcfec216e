"""Shared bits for the benchmarks."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def median_of(runs: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(runs))


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def now() -> float:
    return time.perf_counter()
