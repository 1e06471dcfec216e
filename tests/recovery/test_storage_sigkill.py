"""A real writer process is SIGKILLed; everything it reported as appended must be there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from sievemq.gateway.streamproto_session.subscription import wire_chunks
from sievemq.storage import Stream, StreamConfig

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from sievemq.storage import Durability, Message, Stream, StreamConfig

    s = Stream.open(Path(sys.argv[1]), StreamConfig(
        durability=Durability.BATCH, max_segment_bytes=20_000, filter_size_bytes=32))
    stream_kind = sys.argv[2] == "stream"
    i = 0
    while True:
        if stream_kind and i % 3:  # stream-protocol records: osiris-layout chunks
            batch = [Message((f"v{(i + j) % 7}",), "", "", b"", b"%d" % (i + j), 1)
                     for j in range(1 + i % 5)]
        else:  # 0-9-1 records (record-table layout)
            batch = [Message((f"v{(i + j) % 7}",), "ex", "rk", b"\\x80\\x00", b"%d" % (i + j))
                     for j in range(1 + i % 5)]
        first = s.append(batch)
        i += len(batch)
        if i % 50 < 5:
            s.sync()
        print(first, len(batch), flush=True)
    """
)


@pytest.mark.parametrize("kind", ["amqp", "stream"])
def test_sigkill_during_batch_appends_loses_nothing_reported(tmp_path: Path, kind: str) -> None:
    """``stream``: two batches in three are stream-protocol records, written in the osiris
    layout, the third 0-9-1 records in the record-table layout."""
    directory = tmp_path / "s"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), kind],
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
    if kind == "stream":
        # what a stream-protocol subscriber is sent: every stored chunk as osiris chunks whose
        # entries are the bodies, and at least one of them read in the osiris layout as stored
        layouts = set()
        r = s.reader()
        sent: list[bytes] = []
        while not r.at_end:
            for raw in r.read_chunks(10_000, osiris=True):
                layouts.add(raw.osiris)
                built = wire_chunks(s, raw, 1 << 20)
                if built is None:  # holds 0-9-1 records: the record path converts them
                    sent.extend(b"" for _ in range(raw.records))
                    continue
                for _, head, data in built:
                    assert zlib.crc32(data) == int.from_bytes(head[32:36], "big")
                    entries = bytes(data)
                    while entries:
                        n = int.from_bytes(entries[:4], "big")
                        sent.append(entries[4 : 4 + n])
                        entries = entries[4 + n :]
        assert layouts == {True, False}
        assert len(sent) == s.end_offset
        assert all(b == b"" or b == b"%d" % i for i, b in enumerate(sent))
    s.close()
