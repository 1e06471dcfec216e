"""A real writer process is SIGKILLed; everything it reported as appended must be there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from sievemq.storage import Stream, StreamConfig

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from sievemq.storage import Durability, Message, Stream, StreamConfig

    s = Stream.open(Path(sys.argv[1]), StreamConfig(
        durability=Durability.BATCH, max_segment_bytes=20_000, filter_size_bytes=32))
    i = 0
    while True:
        batch = [Message((f"v{(i + j) % 7}",), "ex", "rk", b"\\x80\\x00", b"%d" % (i + j))
                 for j in range(1 + i % 5)]
        first = s.append(batch)
        i += len(batch)
        if i % 50 < 5:
            s.sync()
        print(first, len(batch), flush=True)
    """
)


def test_sigkill_during_batch_appends_loses_nothing_reported(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    reported: list[tuple[int, int]] = []
    while len(reported) < 2000:
        line = child.stdout.readline()
        assert line, "writer died early"
        first, count = map(int, line.split())
        reported.append((first, count))
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()

    end = reported[-1][0] + reported[-1][1]
    s = Stream.open(directory, StreamConfig())
    assert s.end_offset >= end
    assert s.stats().segments > 1
    r = s.reader()
    got = []
    while True:
        got.extend(r.read(10_000))
        if r.at_end:
            break
    assert [x.offset for x in got] == list(range(s.end_offset))
    assert all(x.body == b"%d" % x.offset for x in got)
    assert all(x.filter_values == (f"v{x.offset % 7}",) for x in got)
    s.close()
