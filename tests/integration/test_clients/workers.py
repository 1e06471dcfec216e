"""Framework workers as real processes: started with ``python -m MODULE ARGS``, ready once
they print ``worker ready`` (the frameworks log on stdout too), terminated afterwards."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@contextmanager
def worker_process(module: str, *args: str, stderr: Path) -> Iterator[subprocess.Popen[str]]:
    with stderr.open("w") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # ends if the process exits
                if line.strip() == "worker ready":
                    break
            else:
                pytest.fail(f"the worker exited: {stderr.read_text()}")
            yield proc
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            if proc.stdout is not None:
                proc.stdout.close()
